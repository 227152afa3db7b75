//! `GET /console/events`: the console's live updates, a server-sent `approval` event for
//! each approval that becomes pending and that the principal may see. The events come from
//! the host's approval stream (no polling: other processes' approvals arrive too).

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

pub(crate) async fn stream(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = state.host.approval_events();
    let events = futures_util::stream::unfold((rx, a), |(mut rx, a)| async move {
        loop {
            match rx.recv().await {
                Ok(change)
                    if change.record.status == ApprovalStatus::Pending
                        && a.principal.sees_tenant(change.record.tenant.as_deref()) =>
                {
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
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
