r"""The page at /: ask with an image file or a database item's id, see the top hits in the
service's order, each with its rank, its distance, its image when the service has the dataset's,
its label path and what it shares with the query; a summary above them groups the ranks by the
deepest hierarchy level they share with the query.

Why the hits stay in rank order: grouped by level, a close hit of another label sat below
every worse hit of the query's own label, so the page showed an order the service did not give.
The grouping is kept in the summary, which lists the ranks of each level.

Thumbnails are drawn at up to 128 px: a photo is scaled down smoothly, an image of a few dozen
pixels (Fashion-MNIST's 28) is scaled up with visible pixels, which blur would only smear.

One self-contained HTML file (no scripts or styles from elsewhere), which calls the same JSON API
as any client, with the token typed into it (kept in the page only). An item id is sent as the
digits typed, not as a JavaScript number, which would round an id beyond 2**53.
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>shdh search</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:sans-serif;margin:1.5em;max-width:90em}
fieldset{margin-bottom:1em} label{margin-right:1em}
#preview{max-width:128px;max-height:128px;vertical-align:middle}
img.tiny{image-rendering:pixelated} #preview.tiny{width:64px;height:64px;object-fit:contain}
#error{color:#b00;margin:.5em 0} #query{margin:.5em 0;font-size:110%}
#levels{margin:.5em 0;padding:0;list-style:none}
#levels li{margin:.2em 0;padding:.2em .5em;border-left:6px solid var(--tone)}
#hits{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:.6em;
padding:0;list-style:none}
.hit{padding:.4em;border:1px solid #ccc;border-top:6px solid var(--tone);border-radius:4px;
font-size:85%;overflow-wrap:anywhere}
.hit .frame{width:128px;height:128px;margin:0 auto .3em;display:flex;align-items:center;
justify-content:center;background:#f4f4f4}
.hit img{max-width:128px;max-height:128px}
.hit img.tiny{width:128px;height:128px;object-fit:contain}
.rank{font-weight:bold;font-size:120%} .label{color:#333} .shared{color:#555}
</style></head><body>
<h1>shdh search</h1>
<fieldset><legend>Service</legend>
<label>Token <input id="token" type="password" size="40"></label>
<label>k <input id="k" type="text" inputmode="numeric" value="10" size="5"></label>
<span id="version"></span></fieldset>
<fieldset><legend>Query</legend>
<label>Image (PNG or JPEG) <input id="file" type="file" accept="image/png,image/jpeg"></label>
<img id="preview" alt="">
<button id="by-image">Search by image</button><br><br>
<label>Database item id <input id="item" type="text" inputmode="numeric" size="22"></label>
<button id="by-id">Search by item</button></fieldset>
<div id="error" role="alert"></div><div id="query"></div>
<ul id="levels"></ul><ol id="hits"></ol>
<script>
const $ = (id) => document.getElementById(id);
function headers(extra) {
  return Object.assign({"Authorization": "Bearer " + $("token").value}, extra);
}
function clear(text) {
  $("error").textContent = ""; $("query").textContent = text || "";
  $("levels").textContent = ""; $("hits").textContent = "";
}
function fail(text) { clear(); $("error").textContent = text; }
function reason(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((e) => (e.loc || []).filter((p) => p !== "body").join(".") + ": " +
      e.msg).join("; ");
  }
  return JSON.stringify(detail);
}
function refusal(status, detail) {
  let text = status + ": " + reason(detail);
  if (status === 401) {
    text += $("token").value ? " (the service refused this token: enter the service token " +
      "in the Token field)" : " (enter the service token in the Token field)";
  }
  return text;
}
function whole(field, what) {
  const text = $(field).value.trim();
  if (text === "") return {error: "enter " + what + " first"};
  if (!/^-?[0-9]+$/.test(text)) return {error: what + " must be a whole number, not " + text};
  return {text: text.replace(/^(-?)0+(?=[0-9])/, "$1")};  // JSON allows no leading zeros
}
async function ask(path, init, query) {
  clear("searching...");
  let response, body;
  try { response = await fetch(path, init); } catch (e) {
    fail("the service did not answer: " + e.message); return;
  }
  try { body = await response.json(); } catch (e) { body = {detail: response.statusText}; }
  if (!response.ok) { fail(refusal(response.status, body.detail)); return; }
  $("version").textContent = "index generation " + body.version.generation + ", " +
    body.version.n_items + " items, " + body.version.bits + " bits";
  show(body.results[0], query);
}
function tone(level, deepest) {
  return level > 0 ? "hsl(" + Math.round(120 * level / deepest) + ",60%,45%)" : "#999";
}
function sharedText(hit) {
  if (hit.shared_level === 0) return "";
  if (hit.shared_path === null || hit.shared_path === undefined) {
    return "shares level " + hit.shared_level;
  }
  const what = hit.shared_path === "" ? "the root" : hit.shared_path;
  return "shares " + what + " (level " + hit.shared_level + ")";
}
function describeQuery(result, query, hits) {
  if (result.item_id !== null && result.item_id !== undefined) {
    const label = result.label_path ? "label " + result.label_path :
      "label unknown (start the service with --images to see label paths)";
    return "Query: item " + result.item_id + ", " + label;
  }
  const best = hits.length && hits[0].label_path ? "; the best hit is labelled " +
    hits[0].label_path : "";
  return "Query: " + query + " (an image has no label, so no level is shared" + best + ")";
}
function show(result, query) {
  const hits = result.hits;
  clear(describeQuery(result, query, hits));
  const deepest = Math.max(1, ...hits.map((h) => h.shared_level));
  summarise(hits, deepest);
  for (const hit of hits) $("hits").appendChild(card(hit, deepest));
}
function summarise(hits, deepest) {
  const levels = [...new Set(hits.map((h) => h.shared_level))].filter((l) => l > 0);
  for (const level of levels.sort((a, b) => b - a)) {
    const members = hits.filter((h) => h.shared_level === level);
    const item = document.createElement("li");
    item.className = "level"; item.dataset.level = level;
    item.style.setProperty("--tone", tone(level, deepest));
    item.textContent = sharedText(members[0]) + ": ranks " +
      members.map((h) => h.rank).join(", ");
    $("levels").appendChild(item);
  }
}
function card(hit, deepest) {
  const box = document.createElement("li"); box.className = "hit";
  box.dataset.rank = hit.rank; box.dataset.item = hit.item_id;
  box.dataset.level = hit.shared_level;
  box.style.setProperty("--tone", tone(hit.shared_level, deepest));
  const frame = document.createElement("div"); frame.className = "frame";
  const thumb = document.createElement("img"); thumb.alt = "item " + hit.item_id;
  frame.appendChild(thumb);
  const lines = [["rank", "#" + hit.rank], ["item", "item " + hit.item_id],
    ["distance", "d = " + hit.distance.toFixed(3)], ["label", hit.label_path || ""],
    ["shared", sharedText(hit)]];
  box.appendChild(frame);
  for (const [kind, text] of lines) {
    if (!text) continue;
    const line = document.createElement("div"); line.className = kind;
    line.textContent = text; box.appendChild(line);
  }
  thumbnail(thumb, hit.item_id, frame);
  return box;
}
function sizeClass(img) {
  img.classList.toggle("tiny", Math.max(img.naturalWidth, img.naturalHeight) * 2 <= 128);
  img.dataset.sized = "1";  // drawn at its final size: a page check waits for this, not "complete"
}
async function thumbnail(img, itemId, frame) {
  let response;
  try { response = await fetch("items/" + itemId + "/image", {headers: headers({})}); }
  catch (e) { response = null; }
  if (response && response.ok) {
    img.addEventListener("load", () => sizeClass(img));
    img.src = URL.createObjectURL(await response.blob());
  } else frame.remove();  // the service has no database images: the rest of the card stays
}
$("preview").addEventListener("load", () => sizeClass($("preview")));
$("file").addEventListener("change", () => {
  const file = $("file").files[0];
  if (file) $("preview").src = URL.createObjectURL(file);
});
$("by-image").addEventListener("click", () => {
  const file = $("file").files[0];
  if (!file) { fail("choose an image first"); return; }
  const k = whole("k", "k");
  if (k.error) { fail(k.error); return; }
  ask("search/image?k=" + encodeURIComponent(k.text),
      {method: "POST", headers: headers({"Content-Type": file.type}), body: file},
      "the uploaded image " + file.name);
});
$("by-id").addEventListener("click", () => {
  const item = whole("item", "a database item id");
  const k = whole("k", "k");
  if (item.error || k.error) { fail(item.error || k.error); return; }
  const body = '{"ids": [' + item.text + '], "k": ' + k.text + '}';
  ask("search/ids", {method: "POST", headers: headers({"Content-Type": "application/json"}), body});
});
</script></body></html>
"""
