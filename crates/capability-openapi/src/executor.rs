//! Operations as executable capabilities: the executable manifest of each operation and the
//! [`Executor`] that plans and sends its HTTP request.
//!
//! The executable manifest is the reference manifest with what execution needs: schemas
//! bundled so that they compile (local `$ref`s copied under `$defs`), a `cookies` input group
//! for cookie parameters, an output schema that admits every `2xx` response, `secrets.read`
//! declared next to `network.connect` when the operation carries credentials, and the server
//! in `metadata.server`.
//!
//! Credentials come from [`SecretRef`]s (`env:NAME` or a name in the home's secrets file),
//! are read at execution only when `secrets.read` was granted, and never appear in plans,
//! receipts, audit events or errors: the plan names the scheme and where the credential goes,
//! and any occurrence of a secret value in an error or output is replaced by `[redacted]`,
//! in whatever form a server echoes it (encoded, escaped, base64: see `secret_forms`).

use std::path::PathBuf;
use std::sync::Arc;

use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::schema::CompiledSchema;
use capability_core::{CapabilityError, ErrorCode};
use capability_exec::{
    CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor, HookError, HookResult,
    HttpDestination, HttpExchange, HttpLimits, HttpReport, HttpRequestReport, HttpResponseReport,
    IsolationTier, effects,
};
use serde_json::{Value, json};

use crate::document::{Version, bundle_schema, deref_chain};
use crate::error::ImportError;
use crate::http::{HttpClient, Incoming, Origin, Outgoing, origin_of};
use crate::import::{Import, ImportOptions, Location, Operation, import};
use crate::request::{RequestSpec, build_request};

/// Where a credential comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretRef {
    /// An environment variable of the host.
    Env(String),
    /// A member of the home's secrets file.
    Named(String),
}

impl SecretRef {
    /// `env:NAME`, `secret:NAME` or `NAME` (a name in the secrets file).
    pub fn parse(s: &str) -> Result<SecretRef, SecretRefError> {
        let (kind, name) = match s.split_once(':') {
            Some(("env", n)) => ("env", n),
            Some(("secret", n)) => ("secret", n),
            Some((other, _)) => {
                return Err(SecretRefError::UnknownKind {
                    kind: other.to_string(),
                });
            }
            None => ("secret", s),
        };
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        {
            return Err(SecretRefError::InvalidName {
                name: name.to_string(),
            });
        }
        Ok(if kind == "env" {
            SecretRef::Env(name.into())
        } else {
            SecretRef::Named(name.into())
        })
    }

    /// The reference as written (`env:NAME` / `secret:NAME`): safe to show.
    pub fn to_text(&self) -> String {
        match self {
            SecretRef::Env(n) => format!("env:{n}"),
            SecretRef::Named(n) => format!("secret:{n}"),
        }
    }
}

/// A credential reference that does not read ([`SecretRef::parse`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretRefError {
    /// `kind:NAME` with a kind other than `env` and `secret`.
    #[error("unknown secret kind {kind:?}: use env:NAME or secret:NAME")]
    UnknownKind { kind: String },
    /// An empty name, or one with characters other than letters, digits, `_`, `-` and `.`.
    #[error("invalid secret name {name:?}")]
    InvalidName { name: String },
}

/// Reads secrets: environment variables, and a JSON object of named secrets in a file.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    pub file: Option<PathBuf>,
}

/// Why a credential could not be read at execution (the message never holds a secret).
#[derive(Debug, thiserror::Error)]
enum SecretUnavailable {
    #[error("the environment variable {name} is not set")]
    Unset { name: String },
    #[error("no secrets file to read {name} from")]
    NoFile { name: String },
    #[error("cannot read the secrets file {}: {error}", file.display())]
    Unreadable {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error("the secrets file {} is not a JSON object", file.display())]
    NotJson { file: PathBuf },
    #[error("the secrets file has no secret named {name}")]
    Missing { name: String },
}

impl Secrets {
    fn read(&self, r: &SecretRef) -> Result<String, SecretUnavailable> {
        match r {
            SecretRef::Env(n) => {
                std::env::var(n).map_err(|_| SecretUnavailable::Unset { name: n.clone() })
            }
            SecretRef::Named(n) => {
                let Some(file) = &self.file else {
                    return Err(SecretUnavailable::NoFile { name: n.clone() });
                };
                let bytes = std::fs::read(file).map_err(|error| SecretUnavailable::Unreadable {
                    file: file.clone(),
                    error,
                })?;
                let doc: Value = serde_json::from_slice(&bytes)
                    .map_err(|_| SecretUnavailable::NotJson { file: file.clone() })?;
                doc.get(n)
                    .and_then(Value::as_str)
                    .map(String::from)
                    .ok_or_else(|| SecretUnavailable::Missing { name: n.clone() })
            }
        }
    }
}

/// Where a credential goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Placement {
    Header(String),
    Query(String),
    Cookie(String),
    Bearer,
    Basic,
}

/// One credential an operation sends.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Credential {
    scheme: String,
    placement: Placement,
    secret: SecretRef,
}

impl Credential {
    fn describe(&self) -> Value {
        let (at, name) = match &self.placement {
            Placement::Header(n) => ("header", n.as_str()),
            Placement::Query(n) => ("query", n.as_str()),
            Placement::Cookie(n) => ("cookie", n.as_str()),
            Placement::Bearer => ("header", "Authorization (Bearer)"),
            Placement::Basic => ("header", "Authorization (Basic)"),
        };
        json!({"scheme": self.scheme, "in": at, "name": name, "secret": self.secret.to_text()})
    }
}

/// How a document was added: the import options and the execution settings.
#[derive(Clone, Debug, Default)]
pub struct ApiOptions {
    pub namespace: Option<String>,
    /// Overrides the document's servers (and is allowed as a destination).
    pub base_url: Option<String>,
    /// Security scheme name → secret.
    pub auth: Vec<(String, SecretRef)>,
    /// Where the document came from, for relative server URLs.
    pub document_url: Option<String>,
}

/// A document ready to execute: its operations share the client, the server and secrets.
#[derive(Debug)]
pub struct Api {
    pub import: Import,
    pub server: url::Url,
    pub allowed: Vec<Origin>,
    operations: Vec<Arc<HttpOperation>>,
}

impl Api {
    /// The executable operations, in document order.
    pub fn operations(&self) -> &[Arc<HttpOperation>] {
        &self.operations
    }
}

struct Shared {
    server: url::Url,
    allowed: Vec<Origin>,
    client: Arc<HttpClient>,
    secrets: Secrets,
}

/// One operation: its facts, its executable manifest, the schemas of its responses and the
/// credentials it sends. It is the [`Executor`] of its capability.
pub struct HttpOperation {
    pub operation: Operation,
    /// The executable manifest.
    pub manifest: Value,
    responses: Vec<(String, CompiledSchema)>,
    credentials: Vec<Credential>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HttpOperation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOperation")
            .field("id", &self.operation.id())
            .finish_non_exhaustive()
    }
}

fn substitute_variables(server: &Value) -> Option<String> {
    let mut url = server.get("url")?.as_str()?.to_string();
    if let Some(vars) = server.get("variables").and_then(Value::as_object) {
        for (k, v) in vars {
            if let Some(d) = v.get("default").and_then(Value::as_str) {
                url = url.replace(&format!("{{{k}}}"), d);
            }
        }
    }
    Some(url)
}

fn absolute(url: &str, document_url: Option<&str>) -> Result<url::Url, ImportError> {
    match url::Url::parse(url) {
        Ok(u) => Ok(u),
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            let base = document_url
                .and_then(|d| url::Url::parse(d).ok())
                .ok_or_else(|| {
                    ImportError::Reference(format!(
                        "the server URL {url} is relative: give a base URL"
                    ))
                })?;
            base.join(url)
                .map_err(|e| ImportError::Reference(format!("server URL {url}: {e}")))
        }
        Err(e) => Err(ImportError::Reference(format!("server URL {url}: {e}"))),
    }
}

fn credentials_for(
    doc: &Value,
    op: &Operation,
    auth: &[(String, SecretRef)],
) -> Result<Vec<Credential>, ImportError> {
    let Some(Value::Array(requirements)) = &op.security else {
        return Ok(Vec::new());
    };
    let configured = |name: &str| auth.iter().find(|(s, _)| s == name).map(|(_, r)| r.clone());
    // The first requirement whose schemes are all configured (an empty one needs nothing).
    let Some(chosen) = requirements
        .iter()
        .filter_map(Value::as_object)
        .find(|r| r.keys().all(|k| configured(k).is_some()))
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for scheme_name in chosen.keys() {
        let Some(secret) = configured(scheme_name) else {
            continue;
        };
        let raw = doc
            .pointer(&format!(
                "/components/securitySchemes/{}",
                scheme_name.replace('~', "~0").replace('/', "~1")
            ))
            .ok_or_else(|| {
                ImportError::Reference(format!("security scheme {scheme_name} is not defined"))
            })?;
        let scheme = deref_chain(doc, raw)?;
        let text = |k: &str| scheme.get(k).and_then(Value::as_str).unwrap_or_default();
        let placement = match text("type") {
            "apiKey" => {
                let name = text("name").to_string();
                match text("in") {
                    "header" => Placement::Header(name),
                    "query" => Placement::Query(name),
                    "cookie" => Placement::Cookie(name),
                    other => {
                        return Err(ImportError::Reference(format!(
                            "security scheme {scheme_name}: apiKey in {other:?} is not supported"
                        )));
                    }
                }
            }
            "http" if text("scheme").eq_ignore_ascii_case("basic") => Placement::Basic,
            "http" | "oauth2" | "openIdConnect" => Placement::Bearer,
            other => {
                return Err(ImportError::Reference(format!(
                    "security scheme {scheme_name}: type {other:?} is not supported"
                )));
            }
        };
        out.push(Credential {
            scheme: scheme_name.clone(),
            placement,
            secret,
        });
    }
    Ok(out)
}

/// The schema of every response with JSON content, by status key.
fn response_schemas(
    doc: &Value,
    op: &Operation,
    v30: bool,
) -> Result<Vec<(String, Value)>, ImportError> {
    let mut out = Vec::new();
    let Some(map) = op.responses.as_object() else {
        return Ok(out);
    };
    for (code, response) in map {
        let Ok(response) = deref_chain(doc, response) else {
            continue;
        };
        if let Some(schema) = crate::import::response_schema(response) {
            out.push((code.clone(), bundle_schema(doc, &schema, v30)?));
        }
    }
    Ok(out)
}

fn is_2xx(code: &str) -> bool {
    code.len() == 3 && code.starts_with('2')
}

fn executable_manifest(
    doc: &Value,
    op: &Operation,
    server: &url::Url,
    credentials: &[Credential],
    schemas: &[(String, Value)],
    v30: bool,
) -> Result<Value, ImportError> {
    let mut manifest = op.manifest.clone();
    let mut input = manifest["input"].clone();
    // Cookie parameters are an input group here (the reference ignores them).
    let cookies: Vec<_> = op
        .parameters
        .iter()
        .filter(|p| p.location == Location::Cookie)
        .collect();
    if !cookies.is_empty() {
        let mut group = json!({"type": "object", "properties": {}, "required": []});
        for p in &cookies {
            group["properties"][&p.name] = p.schema.clone();
            if p.required
                && let Some(Value::Array(r)) = group.get_mut("required")
            {
                r.push(json!(p.name));
            }
        }
        let required = group["required"].as_array().is_some_and(|r| !r.is_empty());
        input["properties"]["cookies"] = group;
        if required {
            match input.get_mut("required") {
                Some(Value::Array(r)) => r.push(json!("cookies")),
                _ => input["required"] = json!(["cookies"]),
            }
        }
    }
    manifest["input"] = bundle_schema(doc, &input, v30)?;
    // Every 2xx response is a valid output; a 2xx without JSON content gives null.
    let map = op.responses.as_object();
    let success: Vec<&String> = map
        .map(|m| m.keys().filter(|k| is_2xx(k)).collect())
        .unwrap_or_default();
    let mut outputs: Vec<Value> = Vec::new();
    for code in &success {
        match schemas.iter().find(|(c, _)| c == *code) {
            Some((_, s)) if !outputs.contains(s) => outputs.push(s.clone()),
            Some(_) => {}
            None => {
                let null = json!({"type": "null"});
                if !outputs.contains(&null) {
                    outputs.push(null);
                }
            }
        }
    }
    let obj = manifest
        .as_object_mut()
        .ok_or_else(|| ImportError::Reference("manifest".into()))?;
    match outputs.len() {
        0 => {
            obj.remove("output");
        }
        1 => {
            obj.insert("output".into(), outputs.remove(0));
        }
        _ => {
            obj.insert("output".into(), json!({"anyOf": outputs}));
        }
    }
    if !credentials.is_empty() {
        obj.insert(
            "effects".into(),
            json!([effects::NETWORK_CONNECT, effects::SECRETS_READ]),
        );
    }
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.insert(
            "server".into(),
            json!(server.as_str().trim_end_matches('/')),
        );
    }
    capability_core::manifest::assert_valid_manifest(&manifest).map_err(ImportError::Manifest)?;
    Ok(manifest)
}

/// Refuses a document two of whose operations get the same capability id (the id is the
/// slug of the operation id, so `listPets` and `ListPets`, or `list pets` and `list-pets`,
/// collide): a runtime registers one capability per id, so serving such a document would
/// fail every time it is loaded. The reference import keeps both; execution cannot. Each
/// operation is `(capability id, operation id, method, path)`.
fn refuse_shared_ids<'a>(
    operations: impl IntoIterator<Item = (&'a str, &'a str, &'a str, &'a str)>,
) -> Result<(), ImportError> {
    let mut seen: std::collections::HashMap<&str, (&str, &str, &str)> = Default::default();
    for (id, operation_id, method, path) in operations {
        if let Some((first_id, first_method, first_path)) =
            seen.insert(id, (operation_id, method, path))
        {
            return Err(ImportError::Conflict(format!(
                "the operations {:?} ({} {}) and {:?} ({} {}) would both be the capability {}: give them operation ids that differ by more than case or punctuation",
                first_id,
                first_method.to_ascii_uppercase(),
                first_path,
                operation_id,
                method.to_ascii_uppercase(),
                path,
                id
            )));
        }
    }
    Ok(())
}

/// Warns (in the import's warnings, shown when a document is added) about header
/// parameters only the HTTP client may set: a call that gives one a value is refused (see
/// [`crate::request`]), so they are usable only when left out.
fn warn_client_headers(imported: &mut Import) {
    let mut warnings = Vec::new();
    for op in &imported.operations {
        for p in &op.parameters {
            if p.location == Location::Header && crate::http::is_client_header(&p.name) {
                warnings.push(format!(
                    "header parameter {} of {} is set by the HTTP client: a call that gives it a value is refused",
                    p.name,
                    op.id()
                ));
            }
        }
    }
    imported.warnings.extend(warnings);
}

/// The server the operations of a document call (`options.base_url`, else the document's
/// first server with its variables' defaults, else the import's base URL), and every origin
/// they may reach (that server and the document's servers).
fn destinations(
    doc: &Value,
    options: &ApiOptions,
    base_url: &str,
) -> Result<(url::Url, Vec<Origin>), ImportError> {
    let doc_url = options.document_url.as_deref();
    let server = absolute(
        &match &options.base_url {
            Some(b) => b.clone(),
            None => doc
                .get("servers")
                .and_then(|s| s.get(0))
                .and_then(substitute_variables)
                .unwrap_or_else(|| base_url.to_string()),
        },
        doc_url,
    )?;
    let mut allowed: Vec<Origin> = Vec::new();
    let mut allow = |u: &url::Url| {
        if let Some(o) = origin_of(u)
            && !allowed.contains(&o)
        {
            allowed.push(o);
        }
    };
    allow(&server);
    for s in doc
        .get("servers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(u) = substitute_variables(s).and_then(|u| absolute(&u, doc_url).ok()) {
            allow(&u);
        }
    }
    Ok((server, allowed))
}

/// The executable operation of one imported operation.
fn build_operation(
    doc: &Value,
    op: Operation,
    auth: &[(String, SecretRef)],
    shared: &Arc<Shared>,
    v30: bool,
) -> Result<HttpOperation, ImportError> {
    let credentials = credentials_for(doc, &op, auth)?;
    let schemas = response_schemas(doc, &op, v30)?;
    let manifest = executable_manifest(doc, &op, &shared.server, &credentials, &schemas, v30)?;
    let responses = schemas
        .into_iter()
        .map(|(code, s)| {
            CompiledSchema::compile(&s)
                .map(|c| (code.clone(), c))
                .map_err(|e| ImportError::Reference(format!("{} response {code}: {e}", op.id())))
        })
        .collect::<Result<_, _>>()?;
    Ok(HttpOperation {
        operation: op,
        manifest,
        responses,
        credentials,
        shared: Arc::clone(shared),
    })
}

/// Imports a document for execution (see the module docs).
pub fn build_api(
    doc: &Value,
    options: &ApiOptions,
    client: Arc<HttpClient>,
    secrets: Secrets,
) -> Result<Api, ImportError> {
    let mut imported = import(
        doc,
        &ImportOptions {
            namespace: options.namespace.clone(),
            base_url: options.base_url.clone(),
        },
    )?;
    refuse_shared_ids(imported.operations.iter().map(|op| {
        (
            op.id(),
            op.operation_id.as_str(),
            op.method,
            op.path.as_str(),
        )
    }))?;
    warn_client_headers(&mut imported);
    let v30 = imported.version == Version::V30;
    let (server, allowed) = destinations(doc, options, &imported.base_url)?;
    let shared = Arc::new(Shared {
        server: server.clone(),
        allowed: allowed.clone(),
        client,
        secrets,
    });
    let operations = imported
        .operations
        .iter()
        .map(|op| build_operation(doc, op.clone(), &options.auth, &shared, v30).map(Arc::new))
        .collect::<Result<_, _>>()?;
    Ok(Api {
        import: imported,
        server,
        allowed,
        operations,
    })
}

/// A document whose operations are built one at a time, when first asked for, and kept: what
/// a host serves from a stored document. Reading it ([`LazyApi::new`]) checks what the whole
/// document decides (its version, its server, that no two operations share a capability id)
/// and notes where each operation is, without reading any schema; [`LazyApi::operation`]
/// imports and builds one operation (the same import and build as [`build_api`]), so that an
/// operation that cannot be built is found, and refused, only when it is used.
pub struct LazyApi {
    doc: Value,
    auth: Vec<(String, SecretRef)>,
    prepared: crate::import::Prepared,
    located: Vec<crate::import::Located>,
    ids: Vec<String>,
    by_id: std::collections::HashMap<String, usize>,
    shared: Arc<Shared>,
    built: Vec<std::sync::OnceLock<Result<Arc<HttpOperation>, ImportError>>>,
}

impl std::fmt::Debug for LazyApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyApi")
            .field("namespace", &self.prepared.namespace)
            .field("operations", &self.ids.len())
            .field("built", &self.built_count())
            .finish_non_exhaustive()
    }
}

impl LazyApi {
    /// Reads a document for execution without building any operation (see the type docs).
    pub fn new(
        doc: Value,
        options: &ApiOptions,
        client: Arc<HttpClient>,
        secrets: Secrets,
    ) -> Result<LazyApi, ImportError> {
        let prepared = crate::import::prepare(
            &doc,
            &ImportOptions {
                namespace: options.namespace.clone(),
                base_url: options.base_url.clone(),
            },
        )?;
        let located = crate::import::locate(&doc);
        let ids: Vec<String> = located
            .iter()
            .map(|at| at.id(&prepared.namespace))
            .collect();
        refuse_shared_ids(ids.iter().zip(&located).map(|(id, at)| {
            (
                id.as_str(),
                at.operation_id.as_str(),
                at.method,
                at.path.as_str(),
            )
        }))?;
        let (server, allowed) = destinations(&doc, options, &prepared.base_url)?;
        let by_id = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        let built = located.iter().map(|_| std::sync::OnceLock::new()).collect();
        Ok(LazyApi {
            auth: options.auth.clone(),
            prepared,
            located,
            ids,
            by_id,
            shared: Arc::new(Shared {
                server,
                allowed,
                client,
                secrets,
            }),
            built,
            doc,
        })
    }

    /// The namespace of the capability ids.
    pub fn namespace(&self) -> &str {
        &self.prepared.namespace
    }

    /// The server the operations call.
    pub fn server(&self) -> &url::Url {
        &self.shared.server
    }

    /// The capability id of every operation, in document order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Whether the document has the operation `id`.
    pub fn serves(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// The operation `id`, built on first use (`None` when the document has no such
    /// operation; its build error, every time, when it cannot be built).
    pub fn operation(&self, id: &str) -> Option<Result<Arc<HttpOperation>, ImportError>> {
        let i = *self.by_id.get(id)?;
        let (built, at) = (self.built.get(i)?, self.located.get(i)?);
        Some(
            built
                .get_or_init(|| {
                    let op = crate::import::import_operation(
                        &self.doc,
                        &self.prepared,
                        at,
                        &mut Vec::new(),
                    )?;
                    let v30 = self.prepared.version == Version::V30;
                    build_operation(&self.doc, op, &self.auth, &self.shared, v30).map(Arc::new)
                })
                .clone(),
        )
    }

    /// How many operations have been built so far.
    pub fn built_count(&self) -> usize {
        self.built.iter().filter(|b| b.get().is_some()).count()
    }
}

const REDACTED: &str = "[redacted]";

/// Every form a secret can take on its way back from a server that echoes it: as it is;
/// percent-encoded (every non-alphanumeric byte, or only what is not unreserved), with
/// upper- or lower-case hex; form-encoded (`+` for spaces); JSON-escaped (inside a JSON
/// text); base64 (standard and URL-safe, padded or not). A credential is redacted by value
/// in any of them, not by the shape the redactor expects.
fn secret_forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let mut forms = vec![secret.to_string()];
    for set in [NON_ALPHANUMERIC, NOT_UNRESERVED] {
        let upper = utf8_percent_encode(secret, set).to_string();
        forms.push(lower_hex(&upper));
        forms.push(upper.replace("%20", "+"));
        forms.push(upper);
    }
    forms.push(url::form_urlencoded::byte_serialize(secret.as_bytes()).collect());
    if let Ok(json) = serde_json::to_string(secret) {
        forms.push(json.trim_matches('"').to_string());
    }
    let bytes = secret.as_bytes();
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        forms.push(engine.encode(bytes));
    }
    forms.sort();
    forms.dedup();
    // The longest first, so that a form that contains another is masked whole.
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms
}

/// `%2F` as `%2f`: the hex digits of every escape in lower case.
fn lower_hex(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut chars = encoded.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '%' {
            for _ in 0..2 {
                if let Some(h) = chars.next() {
                    out.push(h.to_ascii_lowercase());
                }
            }
        }
    }
    out
}

/// The forms of every secret (at least 4 bytes) to mask, longest first.
fn redacted_forms(secrets: &[String]) -> Vec<String> {
    let mut forms: Vec<String> = secrets
        .iter()
        .filter(|s| s.len() >= 4)
        .flat_map(|s| secret_forms(s))
        .filter(|f| f.len() >= 4)
        .collect();
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.dedup();
    forms
}

/// Masks every credential of `secrets` in `text`, in every form a server can echo it in
/// (see `secret_forms`): the one redactor of credentials.
pub fn mask_secrets(text: &str, secrets: &[String]) -> String {
    scrub_text(text, &redacted_forms(secrets))
}

/// Masks every form in `forms` (from [`redacted_forms`]).
fn scrub_text(s: &str, forms: &[String]) -> String {
    let mut out = s.to_string();
    for form in forms {
        if out.contains(form.as_str()) {
            out = out.replace(form.as_str(), REDACTED);
        }
    }
    out
}

fn scrub(v: &mut Value, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    match v {
        Value::String(s) => *s = scrub_text(s, secrets),
        Value::Array(items) => items.iter_mut().for_each(|i| scrub(i, secrets)),
        Value::Object(m) => m.values_mut().for_each(|i| scrub(i, secrets)),
        _ => {}
    }
}

/// [`scrub`] for the boundary report: every text it holds.
fn scrub_report(report: &mut HttpReport, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    let request = &mut report.request;
    let texts = [&mut request.method, &mut request.url]
        .into_iter()
        .chain(request.headers.iter_mut())
        .chain(request.credentials.iter_mut());
    for text in texts {
        *text = scrub_text(text, secrets);
    }
    if let Some(exchange) = &mut report.exchange {
        if let Some(t) = &mut exchange.response.content_type {
            *t = scrub_text(t, secrets);
        }
        exchange.destination.address = scrub_text(&exchange.destination.address, secrets);
    }
}

fn denied(message: String) -> ExecutionFailure {
    HookError::Capability(CapabilityError::new(ErrorCode::PermissionDenied, message)).into()
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl HttpOperation {
    /// The request an input gives (no credential).
    pub fn request(&self, input: &Value) -> Result<RequestSpec, CapabilityError> {
        build_request(&self.operation, &self.shared.server, input).map_err(|e| {
            CapabilityError::new(
                ErrorCode::InvalidInput,
                format!("{}: {e}", self.operation.id()),
            )
        })
    }

    /// The capability id.
    pub fn id(&self) -> &str {
        self.operation.id()
    }

    /// The credential schemes this operation sends.
    pub fn credential_schemes(&self) -> Vec<String> {
        self.credentials.iter().map(|c| c.scheme.clone()).collect()
    }

    fn isolation(
        &self,
        spec: &RequestSpec,
        response: Option<&Incoming>,
        timeout_ms: u128,
    ) -> HttpReport {
        let config = self.shared.client.config();
        let credential_headers = self.credentials.iter().filter_map(|c| match &c.placement {
            Placement::Header(n) => Some(n.clone()),
            Placement::Bearer | Placement::Basic => Some("Authorization".into()),
            _ => None,
        });
        HttpReport {
            tier: IsolationTier::InProcess,
            request: HttpRequestReport {
                method: spec.method.clone(),
                url: spec.url.as_str().to_string(),
                headers: spec
                    .headers
                    .iter()
                    .map(|(k, _)| k.clone())
                    .chain(credential_headers)
                    .collect(),
                body_bytes: spec.body.as_ref().map_or(0, |(_, b)| b.len() as u64),
                credentials: self.credentials.iter().map(|c| c.scheme.clone()).collect(),
            },
            limits: HttpLimits {
                timeout_ms: u64::try_from(timeout_ms).unwrap_or(u64::MAX),
                max_response_bytes: config.max_response_bytes as u64,
                max_redirects: config.max_redirects,
                retries: config.retries,
            },
            exchange: response.map(|r| HttpExchange {
                response: HttpResponseReport {
                    status: r.status,
                    bytes: r.body.len() as u64,
                    content_type: r.content_type.clone(),
                },
                destination: HttpDestination {
                    address: r.address.to_string(),
                },
                attempts: r.attempts,
                redirects: r.redirects,
            }),
        }
    }

    fn validate_response(&self, status: u16, body: &Value) -> Result<(), CapabilityError> {
        let code = status.to_string();
        let range = format!("{}XX", &code[..1]);
        let schema = self
            .responses
            .iter()
            .find(|(c, _)| *c == code)
            .or_else(|| {
                self.responses
                    .iter()
                    .find(|(c, _)| c.eq_ignore_ascii_case(&range))
            })
            .or_else(|| self.responses.iter().find(|(c, _)| c == "default"));
        let Some((_, schema)) = schema else {
            return Ok(());
        };
        let issues = schema.validate(body);
        if issues.is_empty() {
            return Ok(());
        }
        Err(CapabilityError::new(
            ErrorCode::InvalidOutput,
            format!("the HTTP {status} response does not match the document's schema"),
        )
        .with_details(serde_json::to_value(issues).unwrap_or(Value::Null)))
    }
}

impl Executor for HttpOperation {
    fn name(&self) -> &str {
        "http"
    }

    fn plan(
        &self,
        _capability: &dyn CapabilityView,
        input: &Value,
        _cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>> {
        let spec = self.request(input)?;
        let (summary, mut data) = self.operation.reference_plan(input);
        let mut request = spec.to_json();
        if !self.credentials.is_empty() {
            request["credentials"] =
                Value::Array(self.credentials.iter().map(Credential::describe).collect());
        }
        data["request"] = request;
        data["operationId"] = json!(self.operation.operation_id);
        data["server"] = json!(self.shared.server.as_str().trim_end_matches('/'));
        Ok(Some(PlanDetails {
            effects: None,
            summary: Some(summary),
            data: Some(data),
        }))
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        request.require_tier(IsolationTier::InProcess)?;
        let granted = request.granted_effects();
        if !granted.iter().any(|e| e == effects::NETWORK_CONNECT) {
            return Err(denied(format!(
                "{}: network.connect was not granted",
                self.id()
            )));
        }
        let spec = self
            .request(&request.plan.input)
            .map_err(HookError::Capability)?;
        let mut secrets = Vec::new();
        let mut outgoing = Outgoing {
            method: spec.method.clone(),
            url: spec.url.clone(),
            headers: spec.headers.clone(),
            body: spec.body.clone(),
        };
        let mut cookies = spec.cookies.clone();
        if !self.credentials.is_empty() {
            if !granted.iter().any(|e| e == effects::SECRETS_READ) {
                return Err(denied(format!(
                    "{}: secrets.read was not granted",
                    self.id()
                )));
            }
            for c in &self.credentials {
                let value = self.shared.secrets.read(&c.secret).map_err(|e| {
                    HookError::Capability(CapabilityError::new(
                        ErrorCode::ExecutionFailed,
                        format!("credential {} ({}): {e}", c.scheme, c.secret.to_text()),
                    ))
                })?;
                match &c.placement {
                    Placement::Header(n) => outgoing.headers.push((n.clone(), value.clone())),
                    Placement::Query(n) => {
                        outgoing.url.query_pairs_mut().append_pair(n, &value);
                    }
                    Placement::Cookie(n) => cookies.push((n.clone(), value.clone())),
                    Placement::Bearer => outgoing
                        .headers
                        .push(("Authorization".into(), format!("Bearer {value}"))),
                    Placement::Basic => {
                        use base64::Engine;
                        let encoded =
                            base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
                        secrets.push(encoded.clone());
                        outgoing
                            .headers
                            .push(("Authorization".into(), format!("Basic {encoded}")));
                    }
                }
                if value.bytes().any(|b| b == b'\r' || b == b'\n') {
                    return Err(HookError::Capability(CapabilityError::new(
                        ErrorCode::ExecutionFailed,
                        format!("credential {} holds a line break", c.scheme),
                    ))
                    .into());
                }
                secrets.push(value);
            }
        }
        // Every form each credential can be echoed in, worked out once per call.
        let secrets = redacted_forms(&secrets);
        if !cookies.is_empty() {
            let header = cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ");
            outgoing.headers.push(("Cookie".into(), header));
        }
        let timeout = request.timeout;
        let timeout_ms = timeout
            .unwrap_or(self.shared.client.config().timeout)
            .min(self.shared.client.config().timeout)
            .as_millis();
        let cancel = request.cancel;
        let result = self
            .shared
            .client
            .send(outgoing, &self.shared.allowed, timeout, &|| {
                cancel.is_cancelled()
            });
        let fail = |error: HookError, response: Option<&Incoming>| {
            let mut isolation = self.isolation(&spec, response, timeout_ms);
            scrub_report(&mut isolation, &secrets);
            let error = match error {
                HookError::Capability(mut c) => {
                    c.message = scrub_text(&c.message, &secrets);
                    HookError::Capability(c)
                }
                HookError::Other { name, message } => HookError::Other {
                    name,
                    message: scrub_text(&message, &secrets),
                },
            };
            ExecutionFailure::new(error, Some(isolation.into()))
        };
        let response = match result {
            Ok(r) => r,
            Err(e) => {
                let name = match e {
                    crate::http::HttpError::Timeout(_) => "TimeoutError",
                    crate::http::HttpError::Cancelled => "AbortError",
                    _ => "HttpError",
                };
                let error = match e {
                    crate::http::HttpError::Destination(_)
                    | crate::http::HttpError::CrossOriginRedirect(_)
                    | crate::http::HttpError::InsecureRedirect(_) => {
                        HookError::Capability(CapabilityError::new(
                            ErrorCode::PermissionDenied,
                            format!("{}: {e}", self.id()),
                        ))
                    }
                    _ => HookError::named(name, format!("{} {}: {e}", spec.method, spec.url)),
                };
                return Err(fail(error, None));
            }
        };
        let text = String::from_utf8_lossy(&response.body);
        if !(200..300).contains(&response.status) {
            let shown = cut(&text, 1024);
            return Err(fail(
                HookError::named("HttpError", format!("HTTP {}: {shown}", response.status)),
                Some(&response),
            ));
        }
        let json_body = response
            .content_type
            .as_deref()
            .is_some_and(|c| c.contains("json"));
        let mut output = if response.body.is_empty() {
            Value::Null
        } else if json_body {
            match serde_json::from_slice(&response.body) {
                Ok(v) => v,
                Err(e) => {
                    return Err(fail(
                        HookError::named("HttpError", format!("the response is not JSON: {e}")),
                        Some(&response),
                    ));
                }
            }
        } else {
            Value::String(text.into_owned())
        };
        scrub(&mut output, &secrets);
        if let Err(e) = self.validate_response(response.status, &output) {
            return Err(fail(HookError::Capability(e), Some(&response)));
        }
        let mut isolation = self.isolation(&spec, Some(&response), timeout_ms);
        scrub_report(&mut isolation, &secrets);
        Ok(Executed::new(output, isolation.into()))
    }

    fn verify(
        &self,
        _request: &ExecutionRequest<'_>,
        _output: &Value,
    ) -> HookResult<Option<Verification>> {
        Ok(None)
    }

    fn can_rollback(&self, _capability: &dyn CapabilityView) -> bool {
        false
    }

    fn rollback(&self, request: &ExecutionRequest<'_>, _receipt: &Receipt) -> HookResult<Value> {
        Err(HookError::msg(format!(
            "Capability does not provide rollback(): {}",
            request.capability.id()
        )))
    }
}
