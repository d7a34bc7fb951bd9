// All of the dashboard's script (its CSP allows no inline script):
// * a form with data-confirm="question" asks before it is sent;
// * live pages (main[data-live]) fetch their own URL every few seconds and swap in the new
//   content: no full reload, no framework. Paused while the tab is hidden.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });
  var EVERY = 3000;
  var main = document.getElementById("content");
  if (!main || !main.hasAttribute("data-live")) return;
  function refresh() {
    if (document.hidden) return;
    fetch(window.location.href, { headers: { "X-Potatoq-Partial": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        main.innerHTML = html;
        var stamp = document.getElementById("updated");
        if (stamp) stamp.textContent = new Date().toISOString().replace("T", " ").slice(0, 19) + " UTC";
      })
      .catch(function () { /* keep the last good content; try again next time */ });
  }
  setInterval(refresh, EVERY);
})();
