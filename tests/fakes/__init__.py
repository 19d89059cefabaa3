"""Fakes of outside services, served for real so the real clients talk to them."""
