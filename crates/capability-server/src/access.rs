//! Who may call a route of the API.

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone (the OpenAPI document).
    Public,
    /// Any authenticated principal (discovery).
    Any,
    /// Agents and admins: invoke, plan, resume.
    Invoke,
    /// Approvers, auditors and admins.
    Read,
    /// Approvers (for their tenants) and admins.
    Decide,
    /// Admins only: what changes the host's governance (registering capabilities).
    Admin,
}

impl Access {
    /// What the host's principal must be allowed (none for public and any-role routes; the
    /// admin routes check the role).
    pub fn host_access(self) -> Option<capability_host::Access> {
        match self {
            Access::Public | Access::Any | Access::Admin => None,
            Access::Invoke => Some(capability_host::Access::Call),
            Access::Read => Some(capability_host::Access::Read),
            Access::Decide => Some(capability_host::Access::Decide),
        }
    }

    pub fn verb(self) -> &'static str {
        match self {
            Access::Public | Access::Any => "call this",
            Access::Invoke => "invoke capabilities",
            Access::Read => "read approvals, receipts, the audit log or policies",
            Access::Decide => "approve or deny",
            Access::Admin => "change the host's governance",
        }
    }

    pub fn roles(self) -> &'static str {
        match self {
            Access::Public => "none (public)",
            Access::Any => "any role",
            Access::Invoke => "agent, admin",
            Access::Read => "approver, auditor, admin",
            Access::Decide => "approver (for its tenants), admin",
            Access::Admin => "admin",
        }
    }
}
