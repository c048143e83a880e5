// Assistant text as Markdown, rendered safely: markdown-it (vendor/markdown-it.js, the pinned
// package's own browser build, served with the viewer and never fetched from elsewhere).
//
// Raw HTML in the text stays text (`html: false`); a link must pass markdown-it's own check
// (no `javascript:`, `vbscript:`, `file:` or `data:` other than a few image types), opens in a
// new tab and sends no referrer; images are not rendered (the page loads nothing from elsewhere:
// its policy would refuse them anyway), so `![alt](url)` shows as text and a link.
import MarkdownIt from "markdown-it";

const markdown = new MarkdownIt("default", { html: false, linkify: true, typographer: false });
markdown.disable("image");
/** @type {import("markdown-it").RendererRule} */
const linkOpen = (tokens, index, options, _env, self) => {
  const token = tokens[index];
  token.attrSet("target", "_blank");
  token.attrSet("rel", "noopener noreferrer nofollow");
  return self.renderToken(tokens, index, options);
};
markdown.renderer.rules.link_open = linkOpen;

/**
 * Render `text` as Markdown into `el`, replacing what it held.
 * @param {HTMLElement} el @param {string} text
 */
export function renderMarkdown(el, text) {
  el.innerHTML = markdown.render(text);
}
