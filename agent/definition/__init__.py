"""What an agent is: its definition, its tools and how its surface policies resolve."""
