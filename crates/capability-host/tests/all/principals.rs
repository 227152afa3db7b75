//! Principals: what an operator, an agent and a token holder may do.

use capability_host::tokens::{Role, TokenSpec};
use capability_host::{Access, Actor, Credential, Principal};

#[test]
fn an_operator_decides_and_reads_an_agent_only_calls() {
    let op = Principal::operator("alice");
    assert_eq!(op.id(), "operator:alice");
    assert!(op.may(Access::Decide) && op.may(Access::Read));
    assert!(op.sees_tenant(Some("t")) && op.sees_tenant(None));
    let bot = Principal::agent(&Actor::agent("bot"));
    assert_eq!(bot.id(), "agent:bot");
    assert!(bot.may(Access::Call) && !bot.may(Access::Decide) && !bot.may(Access::Read));
    assert_eq!(bot.actor().agent_id.as_deref(), Some("bot"));
}

#[test]
fn a_token_holder_is_the_principal_of_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    let tokens = host.tokens().unwrap();
    let mut spec = TokenSpec::agent("carol");
    spec.role = Role::Approver;
    spec.tenants.insert("acme".into());
    let (record, secret) = tokens.add(&spec).unwrap();
    let carol = host.authenticate(Credential::Bearer(&secret)).unwrap();
    assert_eq!(carol, Principal::from_token(&record));
    assert_eq!(carol.token_id(), Some(record.id.as_str()));
    assert!(carol.may(Access::Decide) && !carol.may(Access::Call));
    assert!(carol.sees_tenant(Some("acme")) && !carol.sees_tenant(Some("globex")));
}
