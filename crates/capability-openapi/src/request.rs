//! The exact HTTP request of an operation, built from a capability input
//! (`{path, query, headers, cookies, body}`): parameters serialized with their OpenAPI
//! `style` and `explode` (path: `simple`, `label`, `matrix`; query: `form`,
//! `spaceDelimited`, `pipeDelimited`, `deepObject`; header: `simple`; cookie: `form`),
//! percent-encoded, and the JSON body.
//!
//! Only declared parameters are sent: an input cannot add a header (`Host`,
//! `Authorization`) or a query member the document does not name. `Accept`, `Content-Type`
//! and `Authorization` header parameters are ignored, as the OpenAPI specification says.
//!
//! The request sent is the one the plan shows, or none:
//!
//! * A header parameter the document declares under a name only the client may set
//!   (`Host`, `Content-Length`, `Transfer-Encoding`, `Connection`, `Upgrade`, `TE`,
//!   `Trailer`, `Keep-Alive`, `Expect`, `Proxy-*`: [`crate::http::is_client_header`]) is
//!   refused when the input gives it a value: the agent's value would reframe the message.
//! * A path parameter can never change which path is called. Its value is percent-encoded
//!   (a `/` becomes `%2F`), and the call is refused when a segment of the expanded path
//!   would be a dot segment (`.`, `..`, or an encoding of one such as `%2E%2E` or `.%2e`,
//!   which the URL standard removes as it would `..`), would decode to one or to a `/` or
//!   `\` (a server that decodes before routing would climb out of the template), or would be
//!   left empty by a parameter (`//`, which servers merge). Refusing was chosen over
//!   re-encoding: no encoding of `..` is safe from every server, and the caller gets a
//!   clear error instead of a request to a path nobody planned.
//! * Then the URL as the URL library parsed it (normalised) must still be the URL that was
//!   built, segment for segment: anything it would rewrite (a dot segment, a `\`, a `?` or
//!   `#` in a template) refuses the call instead of sending another request than planned.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::{Map, Value, json};

use crate::import::{Location, Operation, Parameter};

/// Everything but the unreserved characters (`A-Z a-z 0-9 - . _ ~`): `encodeURIComponent`
/// without its `!'()*` exceptions.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// With `allowReserved`: the reserved characters of RFC 3986 stay as they are (but never the
/// query delimiters `&`, `=` and `#`).
const RESERVED_ALLOWED: &AsciiSet = &COMPONENT
    .remove(b':')
    .remove(b'/')
    .remove(b'?')
    .remove(b'[')
    .remove(b']')
    .remove(b'@')
    .remove(b'!')
    .remove(b'$')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';');

/// Why an input cannot become a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(pub String);

/// An HTTP request before credentials are added.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Upper case.
    pub method: String,
    /// The absolute URL.
    pub url: url::Url,
    pub headers: Vec<(String, String)>,
    pub cookies: Vec<(String, String)>,
    /// `(content type, bytes)`.
    pub body: Option<(String, Vec<u8>)>,
}

impl RequestSpec {
    /// The request as a plan or receipt shows it (the input's own values; credentials are
    /// added later and never appear here).
    pub fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for (k, v) in &self.headers {
            headers.insert(k.clone(), json!(v));
        }
        let mut out = json!({"method": self.method, "url": self.url.as_str(), "headers": headers});
        if !self.cookies.is_empty() {
            let mut c = Map::new();
            for (k, v) in &self.cookies {
                c.insert(k.clone(), json!(v));
            }
            out["cookies"] = Value::Object(c);
        }
        if let Some((ct, bytes)) = &self.body {
            out["body"] = json!({"contentType": ct, "bytes": bytes.len(),
                "json": serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null)});
        }
        out
    }
}

fn primitive(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => capability_core::json::js_string_of(other),
    }
}

fn enc(s: &str, reserved: bool) -> String {
    let set = if reserved {
        RESERVED_ALLOWED
    } else {
        COMPONENT
    };
    utf8_percent_encode(s, set).to_string()
}

/// A path segment value: percent-encoded, and a value made only of dots encoded too. That
/// alone does not stop `..` (the URL standard reads `%2E%2E` as `..`): [`check_path`] refuses
/// any dot segment the expansion makes.
fn enc_path(s: &str) -> String {
    let e = enc(s, false);
    if !e.is_empty() && e.bytes().all(|b| b == b'.') {
        e.replace('.', "%2E")
    } else {
        e
    }
}

fn pairs(v: &Map<String, Value>) -> impl Iterator<Item = (&String, String)> {
    v.iter().map(|(k, v)| (k, primitive(v)))
}

/// `style` for a path parameter.
fn path_value(p: &Parameter, v: &Value) -> String {
    let style = p.style.as_deref().unwrap_or("simple");
    let explode = p.explode.unwrap_or(false);
    let name = enc_path(&p.name);
    let (prefix, sep) = match style {
        "label" => (".".to_string(), if explode { "." } else { "," }),
        "matrix" => (format!(";{name}="), if explode { ";" } else { "," }),
        _ => (String::new(), ","),
    };
    match v {
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(|i| enc_path(&primitive(i))).collect();
            if style == "matrix" && explode {
                parts
                    .iter()
                    .map(|x| format!(";{name}={x}"))
                    .collect::<String>()
            } else {
                format!("{prefix}{}", parts.join(sep))
            }
        }
        Value::Object(m) => {
            if explode {
                let parts: Vec<String> = pairs(m)
                    .map(|(k, x)| format!("{}={}", enc_path(k), enc_path(&x)))
                    .collect();
                match style {
                    "label" => format!(".{}", parts.join(".")),
                    "matrix" => parts.iter().map(|x| format!(";{x}")).collect(),
                    _ => parts.join(","),
                }
            } else {
                let parts: Vec<String> = pairs(m)
                    .flat_map(|(k, x)| [enc_path(k), enc_path(&x)])
                    .collect();
                format!("{prefix}{}", parts.join(","))
            }
        }
        other => format!("{prefix}{}", enc_path(&primitive(other))),
    }
}

/// `name=value` pairs (already encoded) for a query parameter.
fn query_pairs(p: &Parameter, v: &Value, out: &mut Vec<String>) {
    let style = p.style.as_deref().unwrap_or("form");
    let explode = p.explode.unwrap_or(style == "form");
    let r = p.allow_reserved;
    let name = enc(&p.name, false);
    match v {
        Value::Null => {}
        Value::Array(items) => {
            let values: Vec<String> = items
                .iter()
                .filter(|i| !i.is_null())
                .map(|i| enc(&primitive(i), r))
                .collect();
            if style == "form" && explode {
                out.extend(values.iter().map(|x| format!("{name}={x}")));
            } else {
                let sep = match style {
                    "spaceDelimited" => "%20",
                    "pipeDelimited" => "%7C",
                    _ => ",",
                };
                out.push(format!("{name}={}", values.join(sep)));
            }
        }
        Value::Object(m) => match style {
            "deepObject" => out.extend(
                pairs(m).map(|(k, x)| format!("{name}%5B{}%5D={}", enc(k, false), enc(&x, r))),
            ),
            _ if explode => {
                out.extend(pairs(m).map(|(k, x)| format!("{}={}", enc(k, false), enc(&x, r))));
            }
            _ => {
                let parts: Vec<String> = pairs(m)
                    .flat_map(|(k, x)| [enc(k, false), enc(&x, r)])
                    .collect();
                out.push(format!("{name}={}", parts.join(",")));
            }
        },
        other => out.push(format!("{name}={}", enc(&primitive(other), r))),
    }
}

/// A header (or cookie) value in the `simple` (or `form`) style, checked for characters a
/// header cannot carry.
fn simple_value(p: &Parameter, v: &Value) -> Result<String, RequestError> {
    let explode = p.explode.unwrap_or(false);
    let s = match v {
        Value::Array(items) => items.iter().map(primitive).collect::<Vec<_>>().join(","),
        Value::Object(m) => {
            if explode {
                pairs(m)
                    .map(|(k, x)| format!("{k}={x}"))
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                pairs(m)
                    .flat_map(|(k, x)| [k.clone(), x])
                    .collect::<Vec<_>>()
                    .join(",")
            }
        }
        other => primitive(other),
    };
    if s.bytes()
        .any(|b| b == b'\r' || b == b'\n' || b == 0 || (b < 0x20 && b != b'\t'))
    {
        return Err(RequestError(format!(
            "{} {} holds a control character",
            p.location.group(),
            p.name
        )));
    }
    Ok(s)
}

/// How many times a segment is percent-decoded when looking for a hidden dot segment or
/// slash (a value encoded twice, `%252e%252e`, is `..` to a server that decodes twice).
const DECODE_ROUNDS: usize = 4;

/// The forms a server may read a path segment as: the segment, then each percent-decoding
/// of it (until it no longer changes).
fn decoded_forms(segment: &str) -> Vec<String> {
    let mut forms = vec![segment.to_string()];
    for _ in 0..DECODE_ROUNDS {
        let Some(last) = forms.last() else { break };
        let next = percent_decode_str(last).decode_utf8_lossy().into_owned();
        if next == *last {
            break;
        }
        forms.push(next);
    }
    forms
}

/// Whether a (decoded) segment is a dot segment, also when followed by `;parameters`
/// (servers that strip path parameters read `..;x` as `..`).
fn is_dot_segment(form: &str) -> bool {
    let head = form.split(';').next().unwrap_or(form);
    head == "." || head == ".."
}

/// Checks the expanded `path` against its `template`, segment by segment (see the module
/// docs): no dot segment, no slash hidden in a segment, no segment a parameter left empty.
fn check_path(template: &str, path: &str) -> Result<(), RequestError> {
    let templates: Vec<&str> = template.split('/').collect();
    let segments: Vec<&str> = path.split('/').collect();
    if templates.len() != segments.len() {
        return Err(RequestError(format!(
            "the path {template} would not keep its segments"
        )));
    }
    for (t, s) in templates.iter().zip(&segments) {
        let refused = |why: &str| {
            Err(RequestError(format!(
                "the path segment {t} of {template} would be {s:?}, {why}: refused, so that the request sent is the one planned"
            )))
        };
        let forms = decoded_forms(s);
        if forms.iter().any(|f| is_dot_segment(f)) {
            return refused("a dot segment that would move the request to another path");
        }
        if forms.iter().any(|f| f.contains(['/', '\\'])) {
            return refused("a segment that decodes to a slash");
        }
        if s.is_empty() && t.contains('{') {
            return refused("an empty segment");
        }
    }
    Ok(())
}

/// Whether the parsed `url` is the URL that was built (`path` under the server's
/// `base_path`, then `query`), compared after percent-decoding: the URL library may
/// percent-encode what was left as is, but anything else it rewrote (a dot segment removed,
/// a `\` read as `/`, a `?` or `#` in the path) makes another request than the one built.
fn is_built_url(url: &url::Url, base_path: &str, path: &str, query: &[String]) -> bool {
    let decoded = |s: &str| percent_decode_str(s).collect::<Vec<u8>>();
    let built_query = (!query.is_empty()).then(|| query.join("&"));
    decoded(url.path()) == decoded(&format!("{base_path}{path}"))
        && url.query().map(decoded) == built_query.as_deref().map(decoded)
        && url.fragment().is_none()
}

/// Builds the request of `op` against the server `base` from a capability input.
pub fn build_request(
    op: &Operation,
    base: &url::Url,
    input: &Value,
) -> Result<RequestSpec, RequestError> {
    let group = |k: &str| input.get(k).and_then(Value::as_object);
    let mut path = op.path.clone();
    let mut query = Vec::new();
    let mut headers = Vec::new();
    let mut cookies = Vec::new();
    // Later parameters with the same name and location override earlier ones.
    let mut params: Vec<&Parameter> = Vec::new();
    for p in &op.parameters {
        params.retain(|q| !(q.name == p.name && q.location == p.location));
        params.push(p);
    }
    for p in params {
        let value = group(p.location.group()).and_then(|g| g.get(&p.name));
        match (p.location, value) {
            (Location::Path, Some(v)) => {
                path = path.replace(&format!("{{{}}}", p.name), &path_value(p, v));
            }
            (Location::Path, None) => {
                return Err(RequestError(format!(
                    "path parameter {} is missing",
                    p.name
                )));
            }
            (_, None) if p.required => {
                return Err(RequestError(format!(
                    "{} parameter {} is required",
                    p.location.group(),
                    p.name
                )));
            }
            (_, None) => {}
            (Location::Query, Some(v)) => query_pairs(p, v, &mut query),
            (Location::Header, Some(v)) => {
                let lower = p.name.to_ascii_lowercase();
                if matches!(lower.as_str(), "accept" | "content-type" | "authorization") {
                    continue;
                }
                if crate::http::is_client_header(&p.name) {
                    return Err(RequestError(format!(
                        "header parameter {} cannot be given: the HTTP client sets it (it frames the message or the connection)",
                        p.name
                    )));
                }
                if v.is_null() {
                    continue;
                }
                headers.push((p.name.clone(), simple_value(p, v)?));
            }
            (Location::Cookie, Some(v)) => {
                if v.is_null() {
                    continue;
                }
                if !p
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                {
                    return Err(RequestError(format!(
                        "cookie name {} is not a token",
                        p.name
                    )));
                }
                cookies.push((p.name.clone(), enc(&simple_value(p, v)?, false)));
            }
        }
    }
    if let Some(open) = path.find('{')
        && path[open..].contains('}')
    {
        return Err(RequestError(format!(
            "the path {} names a parameter the document does not declare",
            op.path
        )));
    }
    check_path(&op.path, &path)?;
    let mut text = base.as_str().trim_end_matches('/').to_string();
    let base_path = base.path().trim_end_matches('/').to_string();
    text.push_str(&path);
    if !query.is_empty() {
        text.push('?');
        text.push_str(&query.join("&"));
    }
    let url = url::Url::parse(&text).map_err(|e| RequestError(format!("invalid URL: {e}")))?;
    if !url.path().starts_with(&base_path) || url.origin() != base.origin() {
        return Err(RequestError(format!(
            "the request would leave the server {base}"
        )));
    }
    if !is_built_url(&url, &base_path, &path, &query) {
        return Err(RequestError(format!(
            "the URL {text} would be sent as {url}: refused, so that the request sent is the one planned"
        )));
    }
    let body = match (&op.body, input.get("body")) {
        (Some(b), Some(v)) => Some((
            b.media_type.clone(),
            serde_json::to_vec(v).map_err(|e| RequestError(e.to_string()))?,
        )),
        _ => None,
    };
    Ok(RequestSpec {
        method: op.method_upper(),
        url,
        headers,
        cookies,
        body,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn param(location: Location, style: Option<&str>, explode: Option<bool>) -> Parameter {
        Parameter {
            name: "id".into(),
            location,
            schema: json!({}),
            required: false,
            style: style.map(String::from),
            explode,
            allow_reserved: false,
        }
    }

    #[test]
    fn path_styles_follow_the_specification_table() {
        let arr = json!([3, 4, 5]);
        let obj = json!({"role": "admin", "firstName": "Alex"});
        let cases = [
            (None, None, json!(5), "5"),
            (None, None, arr.clone(), "3,4,5"),
            (None, None, obj.clone(), "role,admin,firstName,Alex"),
            (None, Some(true), obj.clone(), "role=admin,firstName=Alex"),
            (Some("label"), None, json!(5), ".5"),
            (Some("label"), None, arr.clone(), ".3,4,5"),
            (Some("label"), Some(true), arr.clone(), ".3.4.5"),
            (
                Some("label"),
                Some(true),
                obj.clone(),
                ".role=admin.firstName=Alex",
            ),
            (Some("matrix"), None, json!(5), ";id=5"),
            (Some("matrix"), None, arr.clone(), ";id=3,4,5"),
            (Some("matrix"), Some(true), arr, ";id=3;id=4;id=5"),
            (
                Some("matrix"),
                Some(true),
                obj,
                ";role=admin;firstName=Alex",
            ),
            (None, None, json!("a/b c"), "a%2Fb%20c"),
            (None, None, json!(".."), "%2E%2E"),
        ];
        for (style, explode, v, want) in cases {
            assert_eq!(
                path_value(&param(Location::Path, style, explode), &v),
                want,
                "{style:?} {explode:?} {v}"
            );
        }
    }

    #[test]
    fn query_styles_follow_the_specification_table() {
        let arr = json!(["blue", "black"]);
        let obj = json!({"R": 100, "G": 200});
        let cases = [
            (None, None, json!("x y&z"), "id=x%20y%26z"),
            (None, None, arr.clone(), "id=blue&id=black"),
            (None, Some(false), arr.clone(), "id=blue,black"),
            (None, None, obj.clone(), "R=100&G=200"),
            (None, Some(false), obj.clone(), "id=R,100,G,200"),
            (
                Some("spaceDelimited"),
                Some(false),
                arr.clone(),
                "id=blue%20black",
            ),
            (Some("pipeDelimited"), Some(false), arr, "id=blue%7Cblack"),
            (
                Some("deepObject"),
                Some(true),
                obj,
                "id%5BR%5D=100&id%5BG%5D=200",
            ),
            (None, None, json!(null), ""),
        ];
        for (style, explode, v, want) in cases {
            let mut out = Vec::new();
            query_pairs(&param(Location::Query, style, explode), &v, &mut out);
            assert_eq!(out.join("&"), want, "{style:?} {explode:?} {v}");
        }
    }

    #[test]
    fn headers_refuse_line_breaks() {
        let p = param(Location::Header, None, None);
        assert_eq!(simple_value(&p, &json!([1, 2])).unwrap(), "1,2");
        assert!(simple_value(&p, &json!("a\r\nHost: evil")).is_err());
    }
}
