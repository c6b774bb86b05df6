// Marks on load how many images decoded (body[data-images-loaded="N/M"], and which did not), for the browser
// check in tests/integration/test_report_browser.py; the page is readable without JavaScript.
window.addEventListener('load', function () {
  var imgs = document.images, ok = 0, bad = [];
  for (var i = 0; i < imgs.length; i++) {
    if (imgs[i].complete && imgs[i].naturalWidth > 0) { ok++; } else { bad.push(imgs[i].getAttribute('data-plot')); }
  }
  document.body.setAttribute('data-images-loaded', ok + '/' + imgs.length);
  document.body.setAttribute('data-images-broken', bad.join(','));
});
