//! # capability-openapi
//!
//! OpenAPI documents as capability contracts, and their operations as governed HTTP calls.
//!
//! * [`import`](mod@import) is the reference import (`capabilitiesFromOpenApi`, byte for byte against
//!   `vectors/openapi-import.json`), for OpenAPI 3.1 and, beyond the reference, 3.0
//!   documents (dispatched on the `openapi` field; Swagger 2.0 and other versions are
//!   refused). [`parse_document`] reads JSON or YAML.
//! * [`executor`] also turns each imported operation into an executable capability manifest:
//!   schemas bundled so that local `$ref`s (recursive ones included) compile, `secrets.read`
//!   declared when the operation carries credentials, the server recorded.
//! * [`request`] builds the exact HTTP request from a capability input: path, query, header
//!   and cookie parameters serialized with their OpenAPI `style`/`explode`, and the JSON body.
//!   The request sent is the one planned or none: a path value that would make a dot segment
//!   (`..`, `%2E%2E`, ...) and a value for a header only the client sets (`Host`,
//!   `Content-Length`, `Transfer-Encoding`, `Connection`, ...) are refused.
//! * [`http`] sends it, over `http://` or `https://` (rustls; system roots, `SSL_CERT_FILE`):
//!   destination checked after DNS resolution, timeouts, a response size limit, redirects
//!   only to the same origin, retries only for idempotent methods.
//! * [`executor`] is the [`capability_exec::Executor`] of one operation: plan (method, URL,
//!   headers, body, with every credential redacted), execute, validate the response against
//!   the schema of its status, and the receipt's boundary record (request summary and
//!   response status, never a secret).
//! * [`store`] keeps documents added to a capability home (`cap openapi add`), only ones it
//!   can read back; [`build_api`] refuses a document two of whose operations would be the
//!   same capability id (`listPets` and `ListPets`), since it could not be served.
//!   [`LazyApi`] serves a stored document the same way, building each operation only when
//!   it is first used (opening a home with a document of 10,000 operations builds none).

pub mod document;
pub mod error;
pub mod import;

pub use document::{Version, parse_document};
pub use error::ImportError;
pub use import::{Import, ImportOptions, Operation, import};
pub mod executor;
pub mod http;
pub mod request;
pub mod store;

pub use executor::{
    Api, ApiOptions, HttpOperation, LazyApi, SecretRef, SecretRefError, Secrets, build_api,
};
pub use http::{HttpClient, HttpConfig, Resolver};
