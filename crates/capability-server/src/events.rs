//! `GET /console/events`: the console's live updates, a server-sent `approval` event for
//! each approval that becomes pending and that the principal may see. The events come from
//! the host's approval stream (no polling: other processes' approvals arrive too). The
//! stream ends when its principal's token is revoked or expires.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use capability_host::ApprovalStatus;
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Authenticated;
use crate::state::AppState;

/// How often an open stream checks that its principal is still authenticated while no
/// event arrives.
const RECHECK: Duration = Duration::from_secs(2);

pub(crate) async fn stream(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = state.host.approval_events();
    let host = state.host;
    // A revoked (or expired) token ends the stream: checked before each event and every
    // few seconds between them.
    let valid = move |a: &Authenticated| {
        let host = std::sync::Arc::clone(&host);
        let principal = a.principal.clone();
        async move {
            tokio::task::spawn_blocking(move || host.still_authenticated(&principal))
                .await
                .unwrap_or(false)
        }
    };
    let events = futures_util::stream::unfold((rx, a), move |(mut rx, a)| {
        let valid = valid.clone();
        async move {
            loop {
                let change = tokio::select! {
                    change = rx.recv() => change,
                    () = tokio::time::sleep(RECHECK) => {
                        if valid(&a).await {
                            continue;
                        }
                        return None;
                    }
                };
                match change {
                    Ok(change)
                        if change.record.status == ApprovalStatus::Pending
                            && a.principal.sees_tenant(change.record.tenant.as_deref()) =>
                    {
                        if !valid(&a).await {
                            return None;
                        }
                        let r = &change.record;
                        let data = serde_json::json!({
                            "id": r.approval_id,
                            "capability": r.capability,
                            "tenant": r.tenant,
                            "agentId": r.agent_id,
                        });
                        let event = Event::default().event("approval").data(data.to_string());
                        return Some((Ok(event), (rx, a)));
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
