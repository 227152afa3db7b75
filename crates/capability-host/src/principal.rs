//! Principals: who calls the host, as every surface authenticates them.
//!
//! A [`Principal`] is a holder of a bearer token or a console login ([`Host::authenticate`]
//! with a [`Credential`]), the operator of the CLI on the host's own machine
//! ([`Principal::operator`]), or the agent of a stdio surface ([`Principal::agent`]). Its
//! [`Role`] says what it may do ([`Access`]); an approver's tenants say whose approvals it
//! may see and decide. Every rule about principals is here or in the host's service
//! methods, so no surface decides who may approve or read.
//!
//! [`Host::authenticate`]: crate::Host::authenticate

use std::collections::BTreeSet;

use capability_policy::{Actor, Decider};

use crate::tokens::{Role, TokenRecord};

/// What a principal asks to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Call capabilities and tools.
    Call,
    /// Read approvals, receipts, the audit log and policies.
    Read,
    /// Approve or deny approvals (of its tenants).
    Decide,
}

impl Access {
    /// The verb, for messages: `call capabilities`, `read`, `decide approvals`.
    pub fn verb(self) -> &'static str {
        match self {
            Access::Call => "call capabilities",
            Access::Read => "read",
            Access::Decide => "decide approvals",
        }
    }
}

/// How a caller proves who it is.
#[derive(Clone, Copy, Debug)]
pub enum Credential<'a> {
    /// A bearer token (`cap_...`).
    Bearer(&'a str),
    /// A console login name and password.
    Login { name: &'a str, password: &'a str },
    /// The id of a token whose holder logged in earlier (a console session): re-read, so that
    /// a revoked or expired token ends the session.
    Session { token_id: &'a str },
}

/// Who calls the host (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    id: String,
    name: String,
    role: Role,
    agent_id: Option<String>,
    tenant: Option<String>,
    scopes: BTreeSet<String>,
    tenants: BTreeSet<String>,
    token_id: Option<String>,
}

impl Principal {
    /// The holder of a token: `token:<id>`, named by its login, else its agent id.
    pub fn from_token(record: &TokenRecord) -> Principal {
        Principal {
            id: format!("token:{}", record.id),
            name: record.name().to_string(),
            role: record.role,
            agent_id: Some(record.agent_id.clone()),
            tenant: record.tenant.clone(),
            scopes: record.scopes.clone(),
            tenants: record.tenants.clone(),
            token_id: Some(record.id.clone()),
        }
    }

    /// The operator of the CLI on the host's own machine (`operator:<name>`): it may read and
    /// decide for every tenant.
    pub fn operator(name: impl Into<String>) -> Principal {
        let name = name.into();
        Principal {
            id: format!("operator:{name}"),
            name,
            role: Role::Admin,
            agent_id: None,
            tenant: None,
            scopes: BTreeSet::new(),
            tenants: BTreeSet::from(["*".to_string()]),
            token_id: None,
        }
    }

    /// The agent of a stdio surface (the process that started it chose who it is): it calls
    /// as `actor`, and never reads or decides.
    pub fn agent(actor: &Actor) -> Principal {
        let agent = actor.agent_id.clone().unwrap_or_default();
        Principal {
            id: actor
                .principal_id
                .clone()
                .unwrap_or_else(|| format!("agent:{agent}")),
            name: agent.clone(),
            role: Role::Agent,
            agent_id: Some(agent),
            tenant: actor.tenant.clone(),
            scopes: actor.scopes.clone(),
            tenants: BTreeSet::new(),
            token_id: None,
        }
    }

    /// `token:<id>`, `operator:<name>` or `agent:<id>`: what approvals record as the
    /// requester of its calls.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name decisions record: the login, else the agent id (the operator's user name).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The agent it calls as, when it calls.
    pub fn agent_id(&self) -> Option<&str> {
        self.agent_id.as_deref()
    }

    /// The tenant it acts in.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The tenants an approver may see and decide for (`*`: every tenant).
    pub fn tenants(&self) -> &BTreeSet<String> {
        &self.tenants
    }

    /// The token it authenticated with (a console session keeps it).
    pub fn token_id(&self) -> Option<&str> {
        self.token_id.as_deref()
    }

    /// Whether its role allows `access`.
    pub fn may(&self, access: Access) -> bool {
        match access {
            Access::Call => self.role.may_call(),
            Access::Read => self.role.may_read(),
            Access::Decide => self.role.may_approve(),
        }
    }

    /// [`Principal::may`] as a refusal: `<name> (role <role>) may not <verb>`.
    pub fn require(&self, access: Access) -> Result<(), crate::error::Forbidden> {
        if self.may(access) {
            return Ok(());
        }
        Err(crate::error::Forbidden::new(
            self.name(),
            format!("(role {}) may not {}", self.role.as_str(), access.verb()),
        ))
    }

    /// Whether it may see approvals of `tenant`: an approver those of its tenants (one
    /// without a tenant needs `*`); every other role that reads sees all.
    pub fn sees_tenant(&self, tenant: Option<&str>) -> bool {
        match self.role {
            Role::Approver => self.covers(tenant),
            _ => true,
        }
    }

    /// The tenants whose records it may read: `None` for every tenant (auditors, admins,
    /// the operator, an approver of `*`), else an approver's tenants (records without a
    /// tenant are not among them).
    pub fn tenant_scope(&self) -> Option<&BTreeSet<String>> {
        match self.role {
            Role::Approver if !self.tenants.contains("*") => Some(&self.tenants),
            _ => None,
        }
    }

    fn covers(&self, tenant: Option<&str>) -> bool {
        self.tenants.contains("*") || tenant.is_some_and(|t| self.tenants.contains(t))
    }

    /// Who acts when it calls: its agent, tenant and scopes, with its id as the principal.
    pub fn actor(&self) -> Actor {
        let mut actor = Actor::agent(self.agent_id.clone().unwrap_or_else(|| self.name.clone()));
        actor.tenant = self.tenant.clone();
        actor.scopes = self.scopes.clone();
        actor.principal_id = Some(self.id.clone());
        actor
    }

    /// Whether it may decide `record` (its role decides, the approval is of one of its
    /// tenants, it did not ask for it): the one rule, asked before showing a decision form.
    pub fn may_decide(&self, record: &capability_policy::ApprovalRecord) -> bool {
        self.may(Access::Decide) && self.decider().check(record).is_ok()
    }

    /// The decider the one approval rule sees: its name, also known as its id and agent id;
    /// an approver limited to its tenants, an admin (and the operator) to none.
    pub(crate) fn decider(&self) -> Decider {
        let mut decider = Decider::named(self.name.clone()).also_known_as(self.id.clone());
        if let Some(agent) = &self.agent_id {
            decider = decider.also_known_as(agent.clone());
        }
        match self.role {
            Role::Admin => decider,
            Role::Approver => decider.for_tenants(self.tenants.iter().cloned()),
            // Roles that may not decide decide for no tenant.
            Role::Agent | Role::Auditor => decider.for_tenants(Vec::new()),
        }
    }
}
