//! `cap openapi`: the reference import (`cap openapi <file|url> [namespace]` prints the
//! operations as inspections), and the documents kept in the home (`add`, `list`, `remove`)
//! whose operations `cap find` and `cap exec` see.

use capability_host::home::Home;
use capability_host::openapi::store::{Entry, Store, namespace_slug, read_source};
use capability_host::openapi::{ImportOptions, SecretRef, import};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::commands::host::HomeArg;
use crate::output::{absolute, error_line, print_json};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OpenapiArgs {
    #[command(subcommand)]
    pub command: Option<OpenapiCommand>,
    /// An OpenAPI 3.0 or 3.1 document (JSON or YAML), a file or an http(s) URL.
    pub source: Option<String>,
    /// The namespace of the imported ids (default: the document's title).
    pub namespace: Option<String>,
    #[command(flatten)]
    pub home: HomeArg,
}

#[derive(Subcommand, Debug)]
pub enum OpenapiCommand {
    /// Keep a document in the home: its operations become executable capabilities.
    Add(AddArgs),
    /// The documents kept in the home.
    List,
    /// Forget a document.
    Remove {
        /// The namespace it was added under.
        namespace: String,
    },
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// An OpenAPI 3.0 or 3.1 document (JSON or YAML), a file or an http(s) URL.
    pub source: String,
    /// The namespace of the operation ids.
    #[arg(long)]
    pub namespace: String,
    /// The server to call instead of the document's first (also an allowed destination).
    #[arg(long)]
    pub base_url: Option<String>,
    /// A credential: `<security scheme>=<secret>`, the secret `env:NAME` or a name in the
    /// home's secrets.json (repeatable). Only the reference is kept, never the value.
    #[arg(long = "auth", value_parser = parse_auth)]
    pub auth: Vec<(String, SecretRef)>,
    /// Allow server names that resolve to private or loopback addresses (an intranet API).
    #[arg(long)]
    pub allow_private_network: bool,
}

fn parse_auth(s: &str) -> Result<(String, SecretRef), String> {
    let (scheme, secret) = s
        .split_once('=')
        .ok_or_else(|| format!("expected <scheme>=<secret ref>, got {s:?}"))?;
    if scheme.is_empty() {
        return Err("the security scheme name is empty".into());
    }
    Ok((
        scheme.to_string(),
        SecretRef::parse(secret).map_err(|e| e.to_string())?,
    ))
}

fn local_source(source: &str) -> String {
    if source.starts_with("http://") || source.starts_with("https://") {
        source.to_string()
    } else {
        absolute(std::path::Path::new(source))
    }
}

pub fn openapi_cmd(args: OpenapiArgs) -> Result<i32, String> {
    match args.command {
        None => {
            let source = args
                .source
                .ok_or("usage: cap openapi <file|url> [namespace] | add | list | remove")?;
            let doc = read_source(&source).map_err(|e| e.to_string())?;
            let imported = import(
                &doc,
                &ImportOptions {
                    namespace: args.namespace,
                    base_url: None,
                },
            )
            .map_err(|e| e.to_string())?;
            for w in &imported.warnings {
                error_line(&format!("warning: {w}"));
            }
            let inspections: Vec<Value> = imported
                .operations
                .iter()
                .map(|op| {
                    let mut v = op.manifest.clone();
                    v["executable"] = json!(false);
                    v
                })
                .collect();
            print_json(&Value::Array(inspections))?;
            Ok(0)
        }
        Some(OpenapiCommand::Add(a)) => add(a, &args.home),
        Some(OpenapiCommand::List) => {
            let store = store(&args.home)?;
            let listed: Vec<Value> = store
                .list()
                .map_err(|e| e.to_string())?
                .iter()
                .map(|e| {
                    let ops = capability_host::openapi::import(&e.document, &ImportOptions {
                        namespace: Some(e.namespace.clone()),
                        base_url: e.base_url.clone(),
                    })
                    .map(|i| i.operations.len())
                    .unwrap_or(0);
                    json!({
                        "namespace": e.namespace, "source": e.source, "baseUrl": e.base_url,
                        "operations": ops,
                        "auth": e.auth.iter().map(|(k, r)| json!({"scheme": k, "secret": r.to_text()})).collect::<Vec<_>>(),
                        "allowPrivateNetwork": e.allow_private,
                    })
                })
                .collect();
            print_json(&Value::Array(listed))?;
            Ok(0)
        }
        Some(OpenapiCommand::Remove { namespace }) => {
            let removed = store(&args.home)?
                .remove(&namespace)
                .map_err(|e| e.to_string())?;
            if !removed {
                return Err(format!(
                    "no OpenAPI document under the namespace {namespace}"
                ));
            }
            let removed = namespace_slug(&namespace).map_err(|e| e.to_string())?;
            print_json(&json!({ "removed": removed }))?;
            Ok(0)
        }
    }
}

fn store(home: &HomeArg) -> Result<Store, String> {
    let home = Home::open_default(home.home.as_deref()).map_err(|e| e.to_string())?;
    Ok(Store::new(home.openapi()))
}

fn add(a: AddArgs, home: &HomeArg) -> Result<i32, String> {
    let home = Home::open_default(home.home.as_deref()).map_err(|e| e.to_string())?;
    let document = read_source(&a.source).map_err(|e| e.to_string())?;
    let entry = Entry {
        namespace: namespace_slug(&a.namespace).map_err(|e| e.to_string())?,
        source: local_source(&a.source),
        base_url: a.base_url,
        auth: a.auth,
        allow_private: a.allow_private_network,
        document,
    };
    // Built once here, so a document that cannot execute is refused before it is kept.
    let api = capability_host::OpenApiSource::build(&entry, Some(home.secrets()))
        .map_err(|e| e.message)?;
    for w in &api.import.warnings {
        error_line(&format!("warning: {w}"));
    }
    for (scheme, _) in &entry.auth {
        if !api
            .operations()
            .iter()
            .any(|o| o.credential_schemes().contains(scheme))
        {
            error_line(&format!(
                "warning: no operation uses the security scheme {scheme}"
            ));
        }
    }
    let path = Store::new(home.openapi())
        .add(&entry)
        .map_err(|e| e.to_string())?;
    print_json(&json!({
        "namespace": entry.namespace,
        "server": api.server.as_str(),
        "stored": path.display().to_string(),
        "capabilities": api.operations().iter().map(|o| json!({
            "id": o.id(), "method": o.operation.method_upper(), "path": o.operation.path,
            "effects": o.manifest["effects"],
        })).collect::<Vec<_>>(),
    }))?;
    Ok(0)
}
