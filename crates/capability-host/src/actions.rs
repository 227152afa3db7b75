//! Any agent action governed by the host, executed by its caller: a model call, a memory
//! write, a function of an embedding language. The caller declares what it governs
//! ([`Host::declare`]), may add policies written in its own language beside the Cedar
//! files ([`Host::add_policy`]), and runs each action through [`Host::intercept`]: the
//! host's governor (before → execute → after → on_error), its approvals and its audit
//! chain, the same ones its executable capabilities go through. An embedding surface (the
//! Python package) calls these and converts values; it decides nothing itself.

use std::convert::Infallible;
use std::sync::Arc;

use capability_policy::audit::{AuditError, AuditEvent};
use capability_policy::engine::Verdict;
use capability_policy::intercept::{Execution, InterceptError, InterceptRequest, InterceptResult};
use capability_policy::{GovernedCapability, Policy, Stage};
use serde_json::Value;

use crate::Host;
use crate::error::{HostError, InvalidRequest};

/// What an embedding surface needs to build requests, policies and decisions.
pub mod governance {
    pub use capability_policy::audit::{AuditEvent, AuditOutcome};
    pub use capability_policy::intercept::{
        Execution, InterceptError, InterceptMode, InterceptRequest, InterceptResult,
    };
    pub use capability_policy::model::{CapabilityKind, RiskLevel};
    pub use capability_policy::pointer::{self, Mutation};
    pub use capability_policy::policy::PolicyFault;
    pub use capability_policy::{
        Decision, DecisionType, IsolationTier, Policy, PolicyContext, SandboxRequirement, Stage,
        Verdict,
    };
}

impl Host {
    /// Declares a governed capability the caller executes itself (any of Brane's kinds).
    /// Unset tenant and environment take the host's. A name the host executes (a built-in,
    /// a package, an OpenAPI operation, an upstream tool) is refused: its governance comes
    /// from its manifest. Declaring a name again replaces the declaration.
    pub fn declare(
        &self,
        capability: GovernedCapability,
    ) -> Result<Arc<GovernedCapability>, HostError> {
        if self.runtime.registry().get(&capability.name).is_some() {
            return Err(InvalidRequest::new(format!(
                "`{}` is a capability this host executes; its governance comes from its manifest",
                capability.name
            ))
            .into());
        }
        Ok(self.governor.register_capability(capability))
    }

    /// Adds a policy beside the Cedar files (it applies to every call of the host, the
    /// executable capabilities' too); returns its id. A policy that fails denies (fail
    /// closed).
    pub fn add_policy(&self, policy: Policy) -> String {
        self.governor.policies().register(policy)
    }

    /// Removes a policy added with [`Host::add_policy`]; whether it existed.
    pub fn remove_policy(&self, id: &str) -> bool {
        self.governor.policies().unregister(id)
    }

    /// Runs `execute` through the governed lifecycle of a declared capability (see
    /// `capability_policy::intercept`): every decision and outcome in the host's audit chain,
    /// an `approval_required` as a pending approval of the host, a token from
    /// [`Host::decide_approval`] in [`InterceptRequest::approval_token`] redeemed once.
    pub fn intercept<E, F>(
        &self,
        request: InterceptRequest,
        execute: F,
    ) -> Result<InterceptResult, InterceptError<E>>
    where
        E: std::fmt::Display,
        F: FnOnce(&Execution<'_>) -> Result<Value, E>,
    {
        self.governor.intercept(request, execute)
    }

    /// The verdict of the policies for a request at a stage (with the output, for the after
    /// stage), without audit or execution.
    pub fn evaluate(
        &self,
        request: &InterceptRequest,
        stage: Stage,
        output: Option<Value>,
    ) -> Result<Verdict, InterceptError<Infallible>> {
        let action = self.governor.create_action(request)?;
        Ok(self.governor.evaluate_action(&action, stage, output)?)
    }

    /// Appends an event made elsewhere (an embedding language's own audit sink) to the
    /// host's chain; returns its id.
    pub fn record_event(&self, event: AuditEvent) -> Result<String, AuditError> {
        let id = event.event_id.clone();
        self.governor.emit_event(event)?;
        Ok(id)
    }
}
