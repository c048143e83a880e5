// The session list: the caller's sessions newest first, a page at a time, each a link to its view.
import { HistoryClient } from "history-transport-client";

// Sessions a page of the list asks for.
const LIST_PAGE = 50;

/**
 * Show one more page of the list and return the cursor of the next, or null at the end.
 * @param {HistoryClient} client
 * @param {HTMLElement} list the `<tbody>` the rows go in
 * @param {string | undefined} cursor
 * @returns {Promise<string | null>}
 */
export async function showSessions(client, list, cursor) {
  const page = await client.sessions({ limit: LIST_PAGE, cursor });
  const doc = list.ownerDocument;
  const fragment = doc.createDocumentFragment();
  for (const session of page.sessions) {
    const row = doc.createElement("tr");
    row.className = "session";
    row.dataset.id = session.id;
    const link = doc.createElement("a");
    link.href = `?session=${encodeURIComponent(session.id)}`;
    link.textContent = session.id;
    const cells = [
      link,
      new Date(session.createdAt).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC"),
      String(session.headSeq),
      String(session.childCount),
    ];
    for (const value of cells) {
      const cell = doc.createElement("td");
      cell.append(value);
      row.append(cell);
    }
    fragment.append(row);
  }
  list.append(fragment);
  return page.nextCursor;
}
