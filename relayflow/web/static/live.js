// The live view: while the flow (or the bulk action) runs, fetch the changing part of its page
// every second and swap it in; stop once it has ended (the fragment says data-active="false").
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const url = live.dataset.liveUrl;
  const active = () => live.querySelector("[data-active]")?.dataset.active === "true";

  async function refresh() {
    try {
      const response = await fetch(url, { headers: { "Accept": "text/html" } });
      if (response.ok) live.innerHTML = await response.text();
    } catch (err) {
      // A missed refresh (a restart, the network) is retried on the next tick.
    }
    if (active()) setTimeout(refresh, 1000);
  }
  if (active()) setTimeout(refresh, 1000);
})();
