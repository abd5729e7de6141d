/* fleetprobe report: findings filter and sort, and opening collapsed sections on navigation.
   Plain DOM, no library; reads data-* attributes and textContent only, never writes HTML. */
(function () {
  "use strict";
  var form = document.getElementById("finding-filters");
  var table = document.getElementById("findings-table");

  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    if (target) { target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", reveal);
  reveal();

  if (!form || !table || !table.tBodies.length) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var count = document.getElementById("finding-count");
  var boxes = Array.prototype.slice.call(form.querySelectorAll("input[name=severity]"));

  function text(name) {
    var input = form.elements.namedItem(name);
    return input ? input.value.trim().toLowerCase() : "";
  }
  function has(value, wanted) {
    return !wanted || (value || "").toLowerCase().indexOf(wanted) !== -1;
  }
  function apply() {
    var severities = {};
    boxes.forEach(function (b) { severities[b.value] = b.checked; });
    var id = text("id"), host = text("host"), cls = text("class");
    var shown = 0;
    rows.forEach(function (r) {
      var ok = severities[r.dataset.severity] === true && has(r.dataset.id, id) &&
        has(r.dataset.host, host) && has(r.dataset["class"], cls);
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " shown";
  }
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (e) { e.preventDefault(); });

  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var order = {};
  function key(row, col) {
    var cell = row.cells[col];
    return cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent.trim().toLowerCase();
  }
  function sortBy(col) {
    // The first click on severity puts failures first; on any other column it sorts A-Z.
    var dir = order[col] ? -order[col] : (col === 0 ? -1 : 1);
    order = {};
    order[col] = dir;
    rows.sort(function (a, b) {
      return dir * key(a, col).localeCompare(key(b, col), undefined, {numeric: true});
    });
    rows.forEach(function (r) { body.appendChild(r); });
    heads.forEach(function (th, i) {
      th.setAttribute("aria-sort", i === col ? (dir > 0 ? "ascending" : "descending") : "none");
    });
  }
  heads.forEach(function (th, col) {
    th.tabIndex = 0;
    th.title = "click to sort";
    th.addEventListener("click", function () { sortBy(col); });
    th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sortBy(col); } });
  });

  // A severity card in the summary filters the table to that severity.
  Array.prototype.slice.call(document.querySelectorAll(".card[data-severity]")).forEach(function (card) {
    card.addEventListener("click", function () {
      boxes.forEach(function (b) { b.checked = b.value === card.dataset.severity; });
      apply();
      document.getElementById("findings").scrollIntoView();
    });
  });
  apply();
}());
