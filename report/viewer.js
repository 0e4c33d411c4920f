// The viewer's only script: keyboard navigation between violations, and
// porcupine's view drawn on demand. It fetches nothing.
(function () {
  "use strict";
  var panels = Array.prototype.slice.call(document.querySelectorAll("article.violation"));
  function current() {
    var y = window.scrollY + 10;
    var at = -1;
    panels.forEach(function (p, i) { if (p.offsetTop <= y) { at = i; } });
    return at;
  }
  function go(i) {
    if (i < 0 || i >= panels.length) { return; }
    panels[i].scrollIntoView({ block: "start" });
    if (history.replaceState) { history.replaceState(null, "", "#" + panels[i].id); }
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    var tag = ev.target && ev.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA") { return; }
    if (ev.key === "j") { go(current() + 1); }
    if (ev.key === "k") { go(current() - 1); }
  });
  var show = document.getElementById("porcupine-show");
  var src = document.getElementById("porcupine-src");
  var frame = document.getElementById("porcupine-frame");
  if (show && src && frame) {
    show.addEventListener("click", function () {
      var iframe = document.createElement("iframe");
      iframe.setAttribute("title", "porcupine's visualisation");
      iframe.srcdoc = JSON.parse(src.textContent);
      frame.textContent = "";
      frame.appendChild(iframe);
      show.disabled = true;
    });
  }
  document.body.setAttribute("data-viewer-ready", "1");
})();
