//! New pending approvals: a watcher reads the approval store (other processes, `cap exec`
//! or the MCP server, add approvals to the same home), tells the console's live pages over
//! server-sent events and calls the webhook.

use std::collections::HashSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use capability_policy::ApprovalStatus;
use capability_policy::approvals::{ApprovalFilter, ApprovalRecord};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Principal;
use crate::{AppState, blocking};

/// A pending approval the watcher has just seen.
#[derive(Clone, Debug)]
pub(crate) struct PendingEvent {
    pub record: ApprovalRecord,
}

/// The newest pending approvals not seen before: reads the newest 64, and more while all
/// of them are new.
fn fresh(state: &AppState, seen: &mut HashSet<String>) -> Vec<ApprovalRecord> {
    let mut limit = 64;
    loop {
        let filter = ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            tenant: None,
            limit: Some(limit),
        };
        let Ok(list) = blocking(|| state.host.approvals().list(&filter)) else {
            return Vec::new();
        };
        let n = list.len();
        let new: Vec<ApprovalRecord> = list
            .into_iter()
            .filter(|r| !seen.contains(&r.approval_id))
            .collect();
        if new.len() < n || n < limit || limit >= 1 << 16 {
            for r in &new {
                seen.insert(r.approval_id.clone());
            }
            // Oldest first, as they were made.
            return new.into_iter().rev().collect();
        }
        limit *= 4;
    }
}

/// Runs until aborted: the approvals pending at start are known; each later one is
/// broadcast once and sent to the webhook.
pub(crate) async fn watch(state: AppState) {
    let mut seen = HashSet::new();
    let _ = fresh(&state, &mut seen);
    let webhook = state.options.webhook.clone();
    loop {
        tokio::time::sleep(state.options.poll_interval).await;
        for record in fresh(&state, &mut seen) {
            if let Some(hook) = &webhook {
                let hook = hook.clone();
                let record = record.clone();
                tokio::spawn(async move { hook.deliver(&record).await });
            }
            let _ = state.events.send(PendingEvent { record });
        }
    }
}

/// `GET /console/events`: `approval` events for the pending approvals this principal may
/// see, as they appear.
pub(crate) async fn stream(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = state.events.subscribe();
    let events = futures_util::stream::unfold((rx, p), |(mut rx, p)| async move {
        loop {
            match rx.recv().await {
                Ok(e) if p.sees_tenant(e.record.tenant.as_deref()) => {
                    let data = serde_json::json!({
                        "id": e.record.approval_id,
                        "capability": e.record.capability,
                        "tenant": e.record.tenant,
                        "agentId": e.record.agent_id,
                    });
                    let event = Event::default().event("approval").data(data.to_string());
                    return Some((Ok(event), (rx, p)));
                }
                Ok(_) | Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
