// Offline search over the course pages: the index (window.COURSE_SEARCH, from
// search_index.js) lists one entry per section {page, anchor, title, heading, text}.
// Every word typed must occur in a section (case-insensitive); the best 50 are shown.
(function () {
  "use strict";
  function snippet(text, word) {
    var at = text.toLowerCase().indexOf(word);
    var start = Math.max(0, at - 60);
    return (start > 0 ? "…" : "") + text.slice(start, start + 180) + "…";
  }
  function search(query) {
    var words = query.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 0; });
    if (words.length === 0) { return []; }
    var hits = [];
    (window.COURSE_SEARCH || []).forEach(function (entry) {
      var heading = entry.heading.toLowerCase();
      var text = entry.text.toLowerCase();
      var score = 0;
      for (var i = 0; i < words.length; i++) {
        if (heading.indexOf(words[i]) >= 0) { score += 3; }
        else if (text.indexOf(words[i]) >= 0) { score += 1; }
        else { return; }
      }
      hits.push({ entry: entry, score: score });
    });
    hits.sort(function (a, b) { return b.score - a.score; });
    return hits.slice(0, 50).map(function (h) { return h.entry; });
  }
  function show(query) {
    var list = document.getElementById("course-search-results");
    list.textContent = "";
    var words = query.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 0; });
    search(query).forEach(function (entry) {
      var li = document.createElement("li");
      var a = document.createElement("a");
      a.href = entry.page + (entry.anchor ? "#" + entry.anchor : "");
      a.textContent = entry.title + " — " + entry.heading;
      var p = document.createElement("div");
      p.className = "course-search-snippet";
      p.textContent = snippet(entry.text, words[0]);
      li.appendChild(a);
      li.appendChild(p);
      list.appendChild(li);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("course-search");
    if (!box) { return; }
    box.addEventListener("input", function () { show(box.value); });
    if (box.value) { show(box.value); }
  });
})();
