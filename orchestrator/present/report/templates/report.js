/* fleetprobe report: filter and sort the findings and hosts tables, open collapsed sections on
   navigation and for printing.  Plain DOM, no library; reads data-* attributes and textContent
   only, never writes HTML. */
(function () {
  "use strict";

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
  // Printing from a browser whose CSS cannot open <details>: open them all first.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });

  function has(value, wanted) {
    return !wanted || (value || "").toLowerCase().indexOf(wanted) !== -1;
  }

  // A filter form over a table: each row is shown when match(row, read) says so.
  function filtered(form, table, count, match) {
    if (!form || !table || !table.tBodies.length) { return null; }
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    function read(name) {
      var input = form.elements.namedItem(name);
      return input ? input.value.trim().toLowerCase() : "";
    }
    function apply() {
      var shown = 0;
      rows.forEach(function (r) {
        var ok = match(r, read);
        r.hidden = !ok;
        if (ok) { shown += 1; }
      });
      count.textContent = shown + " of " + rows.length + " shown";
    }
    form.addEventListener("input", apply);
    form.addEventListener("change", apply);
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    apply();
    return apply;
  }

  // Click a header to sort by its column (data-v when a cell has one); again to reverse.
  function sortable(table, worstFirst) {
    var body = table.tBodies[0];
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var order = {};
    function key(row, col) {
      var cell = row.cells[col];
      return cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent.trim().toLowerCase();
    }
    function sortBy(col) {
      // The first click on the worst-first column puts failures first; any other sorts A-Z.
      var dir = order[col] ? -order[col] : (col === worstFirst ? -1 : 1);
      var rows = Array.prototype.slice.call(body.rows);
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
  }

  var form = document.getElementById("finding-filters");
  var boxes = form ? Array.prototype.slice.call(form.querySelectorAll("input[name=severity]")) : [];
  var findings = filtered(form, document.getElementById("findings-table"), document.getElementById("finding-count"),
    function (r, read) {
      var severities = {};
      boxes.forEach(function (b) { severities[b.value] = b.checked; });
      return severities[r.dataset.severity] === true && has(r.dataset.id, read("id")) &&
        has(r.dataset.host, read("host")) && has(r.dataset["class"], read("class"));
    });
  filtered(document.getElementById("host-filters"), document.getElementById("host-table"),
    document.getElementById("host-list-count"), function (r, read) {
      var health = read("health");
      return (!health || r.dataset.health === health) && has(r.dataset["class"], read("class")) &&
        has(r.dataset.model, read("model")) && has(r.dataset.driver, read("driver"));
    });
  var findingsTable = document.getElementById("findings-table");
  if (findingsTable && findingsTable.tBodies.length) { sortable(findingsTable, 0); }
  var hostTable = document.getElementById("host-table");
  if (hostTable && hostTable.tBodies.length) { sortable(hostTable, -1); }

  // A severity card in the summary filters the findings table to that severity.
  Array.prototype.slice.call(document.querySelectorAll(".card[data-severity]")).forEach(function (card) {
    card.addEventListener("click", function () {
      boxes.forEach(function (b) { b.checked = b.value === card.dataset.severity; });
      if (findings) { findings(); }
      document.getElementById("findings").scrollIntoView();
    });
  });
}());
