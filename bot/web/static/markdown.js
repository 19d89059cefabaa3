/* A reply's Markdown as safe DOM: marked parses, DOMPurify keeps only what Markdown
   makes (both vendored: vendor/README.md). Nothing here runs what a reply says. */
'use strict';
const Markdown = (() => {
  const SAFE_URL = /^(?:https?:|mailto:)/i;
  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const escape = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

  const parser = new marked.Marked({
    gfm: true,
    breaks: true,  // a chat reply's single newlines are line breaks, as Slack shows them
    renderer: {
      // a reply's own HTML is text to read, never elements (DOMPurify is the second wall)
      html({ text }) { return escape(text); },
      // an image becomes a link to it: the page loads nothing from a reply's addresses
      image({ href, text }) { return `<a href="${escape(href)}">${escape(text || href)}</a>`; },
    },
  });

  const PURIFY = {
    ALLOWED_TAGS: ['p', 'br', 'hr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'em', 'del',
      'code', 'pre', 'blockquote', 'ul', 'ol', 'li', 'a', 'table', 'thead', 'tbody', 'tr', 'th',
      'td', 'input'],
    ALLOWED_ATTR: ['href', 'title', 'align', 'start', 'type', 'checked', 'disabled'],
    ALLOWED_URI_REGEXP: SAFE_URL,
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  };

  function wrap(node, cls) {
    const box = document.createElement('div');
    box.className = cls;
    node.replaceWith(box);
    box.append(node);
    return box;
  }

  // What DOMPurify kept, made ready to read: links open apart, wide tables and code scroll
  // inside the reply (never the page), and each code block gets its Copy button.
  function tidy(root) {
    for (const a of root.querySelectorAll('a')) {
      const href = (a.getAttribute('href') || '').trim();
      if (!SAFE_URL.test(href)) { a.replaceWith(...a.childNodes); continue; }
      a.setAttribute('rel', 'noopener noreferrer');
      if (!/^mailto:/i.test(href)) a.setAttribute('target', '_blank');
    }
    for (const box of root.querySelectorAll('input')) {
      if (box.getAttribute('type') === 'checkbox') box.disabled = true; else box.remove();
    }
    for (const table of root.querySelectorAll('table')) wrap(table, 'table-wrap');
    for (const pre of root.querySelectorAll('pre')) {
      const copy = document.createElement('button');
      copy.type = 'button';
      copy.className = 'copy';
      copy.textContent = 'Copy';
      copy.title = 'Copy this code';
      wrap(pre, 'code-block').prepend(copy);
    }
  }

  /** Show ``text`` (a reply's Markdown) as the content of ``node``. */
  function render(node, text) {
    const fragment = DOMPurify.sanitize(parser.parse(String(text || '')), PURIFY);
    tidy(fragment);
    node.replaceChildren(fragment);
  }

  async function copy(button) {
    const pre = button.parentElement.querySelector('pre');
    let done = false;
    try {
      await navigator.clipboard.writeText(pre.textContent.replace(/\n$/, ''));  // marked ends a block with one
      done = true;
    } catch (e) {
      // no Clipboard API (a page served over plain http to another machine): a selection
      const range = document.createRange();
      range.selectNodeContents(pre);
      const selection = getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      done = document.execCommand('copy');
      if (done) selection.removeAllRanges();  // else left selected, for Ctrl+C
    }
    button.textContent = done ? 'Copied' : 'Press Ctrl+C';
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  }
  document.addEventListener('click', (e) => {
    const button = e.target.closest('.code-block > button.copy');
    if (button) copy(button);
  });

  return { render };
})();
