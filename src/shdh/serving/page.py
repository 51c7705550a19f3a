"""The page at /: ask with an image file or a database item's id, see the top hits (with their
images when the service has the dataset's) grouped by the deepest hierarchy level they share
with the query. One self-contained HTML file (no
scripts or styles from elsewhere), which calls the same JSON API as any client, with the token
typed into it (kept in the page only)."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>shdh search</title>
<style>
body{font-family:sans-serif;margin:1.5em;max-width:70em}
fieldset{margin-bottom:1em} label{margin-right:1em}
.level{margin:.5em 0;padding:.5em;border:1px solid #ccc;border-radius:4px}
.hit{display:inline-block;margin:.2em;padding:.3em .5em;background:#eef;border-radius:3px;
text-align:center;font-size:85%} .hit img{width:64px;height:64px;image-rendering:pixelated}
#preview{max-height:96px;image-rendering:pixelated;vertical-align:middle}
#error{color:#b00}
</style></head><body>
<h1>shdh search</h1>
<fieldset><legend>Service</legend>
<label>Token <input id="token" type="password" size="40"></label>
<label>k <input id="k" type="number" value="10" min="1" size="5"></label>
<span id="version"></span></fieldset>
<fieldset><legend>Query</legend>
<label>Image (PNG or JPEG) <input id="file" type="file" accept="image/png,image/jpeg"></label>
<img id="preview" alt="">
<button id="by-image">Search by image</button><br><br>
<label>Database item id <input id="item" type="number" min="0"></label>
<button id="by-id">Search by item</button></fieldset>
<div id="error"></div><div id="results"></div>
<script>
const $ = (id) => document.getElementById(id);
function headers(extra) {
  return Object.assign({"Authorization": "Bearer " + $("token").value}, extra);
}
async function ask(path, init) {
  $("error").textContent = ""; $("results").textContent = "searching...";
  const response = await fetch(path, init);
  const body = await response.json();
  if (!response.ok) {
    $("results").textContent = "";
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    $("error").textContent = response.status + ": " + detail;
    return;
  }
  $("version").textContent = "index generation " + body.version.generation + ", " +
    body.version.n_items + " items, " + body.version.bits + " bits";
  show(body.results[0]);
}
function show(result) {
  const groups = new Map();
  for (const hit of result.hits) {
    if (!groups.has(hit.shared_level)) groups.set(hit.shared_level, []);
    groups.get(hit.shared_level).push(hit);
  }
  const out = $("results"); out.textContent = "";
  for (const level of [...groups.keys()].sort((a, b) => b - a)) {
    const box = document.createElement("div"); box.className = "level";
    box.dataset.level = level;
    const title = document.createElement("h3");
    title.textContent = level > 0 ? "shared level " + level : "hits (the query has no labels)";
    box.appendChild(title);
    for (const hit of groups.get(level)) {
      const span = document.createElement("span"); span.className = "hit";
      span.dataset.item = hit.item_id;
      const thumb = document.createElement("img");
      const caption = document.createElement("div");
      caption.textContent = "#" + hit.item_id + " d=" + hit.distance;
      span.append(thumb, caption);
      box.appendChild(span);
      thumbnail(thumb, hit.item_id);
    }
    out.appendChild(box);
  }
}
async function thumbnail(img, itemId) {
  const response = await fetch("items/" + itemId + "/image", {headers: headers({})});
  if (response.ok) img.src = URL.createObjectURL(await response.blob());
  else img.remove();  // the service has no database images: the id and distance stay
}
$("file").addEventListener("change", () => {
  const file = $("file").files[0];
  if (file) $("preview").src = URL.createObjectURL(file);
});
$("by-image").addEventListener("click", () => {
  const file = $("file").files[0];
  if (!file) { $("error").textContent = "choose an image first"; return; }
  ask("search/image?k=" + encodeURIComponent($("k").value),
      {method: "POST", headers: headers({"Content-Type": file.type}), body: file});
});
$("by-id").addEventListener("click", () => {
  const body = JSON.stringify({ids: [Number($("item").value)], k: Number($("k").value)});
  ask("search/ids", {method: "POST", headers: headers({"Content-Type": "application/json"}), body});
});
</script></body></html>
"""
