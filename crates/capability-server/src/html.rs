//! HTML helpers: escaping, the page layout, redaction of displayed inputs.

use std::fmt::Write as _;

use serde_json::Value;

/// Escapes text for HTML content and quoted attributes.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    esc_into(&mut out, s);
    out
}

pub(crate) fn esc_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Percent-encodes a path segment or query value.
pub(crate) fn url(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The input with the values of secret-looking keys replaced (the host's one rule, which
/// the webhook applies too).
pub(crate) fn redact(value: &Value) -> Value {
    capability_host::approvals::redact_secret_looking(value)
}

pub(crate) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// The page around `body`: navigation (for a signed-in principal), the stylesheet and the
/// script that adds live updates.
/// `who`: the signed-in principal's name, role and CSRF token (for the sign-out form).
pub(crate) fn page(
    title: &str,
    who: Option<(&str, &str, &str)>,
    current: &str,
    body: &str,
) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    out.push_str("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    let _ = write!(out, "<title>{} · cap console</title>", esc(title));
    out.push_str("<link rel=\"stylesheet\" href=\"/console/style.css\">");
    out.push_str("<script src=\"/console/app.js\" defer></script></head><body>");
    out.push_str("<a class=\"skip\" href=\"#main\">Skip to content</a>");
    out.push_str("<header><span class=\"brand\">cap console</span>");
    if let Some((name, role, csrf)) = who {
        out.push_str("<nav aria-label=\"Console\"><ul>");
        for (href, label) in [
            ("/console/approvals", "Pending"),
            ("/console/decided", "Decided"),
            ("/console/audit", "Audit log"),
            ("/console/receipts", "Receipts"),
            ("/console/policies", "Policies"),
        ] {
            let here = if href == current {
                " aria-current=\"page\""
            } else {
                ""
            };
            let _ = write!(out, "<li><a href=\"{href}\"{here}>{label}</a></li>");
        }
        out.push_str("</ul></nav>");
        let _ = write!(
            out,
            "<span class=\"who\">{} <small>({})</small></span>\
             <form class=\"signout\" method=\"post\" action=\"/logout\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button class=\"plain\" type=\"submit\">Sign out</button></form>",
            esc(name),
            esc(role),
            esc(csrf)
        );
    }
    out.push_str("</header><main id=\"main\">");
    let _ = write!(out, "<h1>{}</h1>", esc(title));
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

pub(crate) const STYLE: &str = r#"
:root { --fg:#1d2330; --muted:#5b6475; --line:#d8dde6; --bg:#f6f7f9; --accent:#1f5fbf; --ok:#1b7a3d; --bad:#b3261e; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.45 system-ui, sans-serif; color:var(--fg); background:var(--bg); }
.skip { position:absolute; left:-999px; } .skip:focus { left:8px; top:8px; background:#fff; padding:4px; }
header { display:flex; gap:24px; align-items:center; padding:10px 24px; background:#1d2330; color:#fff; }
header .brand { font-weight:700; }
header nav ul { display:flex; gap:16px; list-style:none; margin:0; padding:0; }
header a { color:#cfe0ff; text-decoration:none; } header a[aria-current=page] { color:#fff; border-bottom:2px solid #fff; }
header .who { margin-left:auto; } header form.signout { margin:0; }
main { padding:16px 24px; max-width:1200px; }
h1 { font-size:22px; margin:8px 0 16px; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:12px 16px; margin:0 0 12px; }
.card h2 { font-size:16px; margin:0 0 8px; }
dl.call { display:grid; grid-template-columns: max-content 1fr; gap:2px 16px; margin:0 0 8px; }
dl.call dt { color:var(--muted); } dl.call dd { margin:0; }
pre { background:#f0f2f6; padding:8px; border-radius:4px; overflow:auto; max-height:320px; margin:4px 0; }
code { font-family: ui-monospace, monospace; font-size:13px; }
form.decide { display:flex; gap:8px; align-items:flex-end; flex-wrap:wrap; }
label { display:flex; flex-direction:column; font-size:13px; color:var(--muted); gap:2px; }
input, textarea, select { font:inherit; padding:4px 6px; border:1px solid #aab3c2; border-radius:4px; }
button { font:inherit; padding:5px 14px; border-radius:4px; border:1px solid transparent; cursor:pointer; }
button.approve { background:var(--ok); color:#fff; } button.deny { background:var(--bad); color:#fff; }
button.plain { background:#fff; border-color:#aab3c2; }
button:focus-visible, a:focus-visible, input:focus-visible, textarea:focus-visible { outline:3px solid #ffbf47; outline-offset:1px; }
table { border-collapse:collapse; width:100%; background:#fff; font-size:13px; }
th, td { border-bottom:1px solid var(--line); padding:4px 6px; text-align:left; vertical-align:top; }
th { background:#eef1f5; }
.status-ok { color:var(--ok); font-weight:600; } .status-bad { color:var(--bad); font-weight:600; }
.banner { padding:8px 12px; border-radius:6px; margin:0 0 12px; border:1px solid var(--line); background:#fff; }
.muted { color:var(--muted); }
form.filters { display:flex; gap:8px; flex-wrap:wrap; align-items:flex-end; margin:0 0 12px; }
#live-status { font-size:13px; color:var(--muted); }
"#;

pub(crate) const SCRIPT: &str = r#"(function () {
  var list = document.getElementById('pending-list');
  var live = document.getElementById('live-status');
  if (!list || !window.EventSource) return;
  var source = new EventSource('/console/events');
  source.onopen = function () { if (live) live.textContent = 'Live updates: connected'; };
  source.onerror = function () { if (live) live.textContent = 'Live updates: reconnecting'; };
  source.addEventListener('approval', function (event) {
    var data = JSON.parse(event.data);
    fetch('/console/approvals?fragment=1', { credentials: 'same-origin' })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        list.innerHTML = html;
        if (live) live.textContent = 'New approval pending: ' + data.capability + ' (' + data.id + ')';
      });
  });
})();
"#;
