//! Calls in flight per principal: a principal over its limit is refused (and the refusal
//! audited) while its other call runs; other principals are not held back; the slot is
//! free again when the call ends.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capability_core::ErrorCode;
use capability_host::upstream::{GatewayConfig, McpSession, UpstreamError};
use capability_host::{Actor, AuditFilter, Host, HostConfig, Outcome, Principal, Request};
use serde_json::{Value, json};

/// An upstream whose `hold` calls wait until the test releases them.
#[derive(Debug)]
struct Gate {
    entered: Mutex<Sender<()>>,
    release: Mutex<Receiver<()>>,
}

impl McpSession for Gate {
    fn request(&self, method: &str, params: Value, _: Duration) -> Result<Value, UpstreamError> {
        if method == "tools/list" {
            return Ok(
                json!({"tools": [{"name": "work", "inputSchema": {"type": "object",
                "properties": {"hold": {"type": "boolean"}}}}]}),
            );
        }
        if params["arguments"]["hold"] == json!(true) {
            self.entered.lock().unwrap().send(()).unwrap();
            self.release.lock().unwrap().recv().unwrap();
        }
        Ok(json!({"content": [{"type": "text", "text": "done"}]}))
    }
    fn dead(&self) -> Option<UpstreamError> {
        None
    }
    fn take_list_changed(&self) -> bool {
        false
    }
    fn kill(&self) {}
}

#[test]
fn a_principal_over_its_limit_is_refused_while_its_call_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (entered_tx, entered) = channel();
    let (release, release_rx) = channel();
    let gate = Arc::new(Gate {
        entered: Mutex::new(entered_tx),
        release: Mutex::new(release_rx),
    });
    let gateway: GatewayConfig =
        toml::from_str("[[server]]\nname = \"slow\"\ncommand = \"unused\"").unwrap();
    let host = Arc::new(
        Host::open(HostConfig {
            home: Some(dir.path().join("home")),
            gateway: Some(gateway),
            upstream_connect: Some(Arc::new(move |_, _| {
                Ok(Arc::clone(&gate) as Arc<dyn McpSession>)
            })),
            max_calls_per_principal: Some(1),
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let call = |agent: &str, hold: bool| {
        Request::new("mcp.slow.work", json!({"hold": hold})).by(Actor::agent(agent))
    };
    let running = {
        let (host, request) = (Arc::clone(&host), call("p", true));
        std::thread::spawn(move || host.invoke(&request))
    };
    entered.recv_timeout(Duration::from_secs(30)).unwrap();

    let refused = host.invoke(&call("p", false));
    let Outcome::Failed(e) = &refused else {
        panic!("{refused:?}")
    };
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        e.message.contains("too many calls in flight for `p`"),
        "{}",
        e.message
    );
    assert!(e.receipt_id.is_none(), "nothing ran");
    // Another principal is not held back.
    assert!(matches!(
        host.invoke(&call("q", false)),
        Outcome::Completed(_)
    ));

    release.send(()).unwrap();
    assert!(matches!(running.join().unwrap(), Outcome::Completed(_)));
    assert!(matches!(
        host.invoke(&call("p", false)),
        Outcome::Completed(_)
    ));

    // The refusal is in the audit log, under its agent.
    let query = AuditFilter {
        agent: Some("p".into()),
        ..AuditFilter::default()
    }
    .query()
    .unwrap();
    let page = host.audit_query(&Principal::operator("o"), &query).unwrap();
    let codes: Vec<&Value> = page.events.iter().map(|e| &e.event["code"]).collect();
    assert!(codes.contains(&&json!("rate_limited")), "{codes:?}");
}
