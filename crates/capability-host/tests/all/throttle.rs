//! Failed sign-ins and bearer tokens are throttled per address and per login (issue 30,
//! item 8), without letting an attacker lock a real user out.

use std::net::IpAddr;
use std::time::Duration;

use capability_host::throttle::{FREE_PER_ADDRESS, FREE_PER_PAIR, LOGIN_ALARM};
use capability_host::tokens::{AuthError, Role, TokenSpec};
use capability_host::{Credential, Host};

fn ip(last: u8) -> Option<IpAddr> {
    Some(IpAddr::from([10, 0, 0, last]))
}

fn with_login(host: &Host) -> String {
    let mut spec = TokenSpec::agent("alice");
    spec.role = Role::Approver;
    spec.login = Some(("alice".into(), "correct horse".into()));
    host.tokens().unwrap().add(&spec).unwrap().1
}

fn login(host: &Host, password: &str, from: Option<IpAddr>) -> Result<(), AuthError> {
    host.authenticate_from(
        Credential::Login {
            name: "alice",
            password,
        },
        from,
    )
    .map(|_| ())
}

#[test]
fn a_guessing_address_is_locked_and_the_lock_ends() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    with_login(&host);
    for _ in 0..FREE_PER_PAIR {
        assert!(matches!(
            login(&host, "guess", ip(1)),
            Err(AuthError::BadLogin)
        ));
    }
    // Locked: even the right password is refused, before it is checked.
    match login(&host, "correct horse", ip(1)) {
        Err(AuthError::Throttled { retry_after }) => {
            assert!(retry_after <= Duration::from_secs(1), "{retry_after:?}");
        }
        other => panic!("{other:?}"),
    }
    // Another address is not locked by it.
    assert!(login(&host, "correct horse", ip(2)).is_ok());
    // The lock ends (1 s after the first failure over the limit's last one).
    std::thread::sleep(Duration::from_millis(1100));
    assert!(login(&host, "correct horse", ip(1)).is_ok());
    // A success clears the pair; each failure past the free ones doubles the lock.
    for _ in 0..FREE_PER_PAIR {
        assert!(matches!(
            login(&host, "guess", ip(3)),
            Err(AuthError::BadLogin)
        ));
    }
    std::thread::sleep(Duration::from_millis(1100));
    assert!(matches!(
        login(&host, "guess", ip(3)),
        Err(AuthError::BadLogin)
    ));
    match login(&host, "guess", ip(3)) {
        Err(AuthError::Throttled { retry_after }) => {
            assert!(retry_after > Duration::from_secs(1), "{retry_after:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_guess_spread_over_many_addresses_cannot_lock_out_a_clean_one() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    with_login(&host);
    for i in 0..LOGIN_ALARM {
        let from = Some(IpAddr::from([10, 1, (i / 200) as u8, (i % 200) as u8]));
        assert!(matches!(
            login(&host, "guess", from),
            Err(AuthError::BadLogin)
        ));
    }
    // An address that already failed for alice is locked from its first failure now.
    let seen = Some(IpAddr::from([10, 1, 0, 0]));
    assert!(matches!(
        login(&host, "guess", seen),
        Err(AuthError::Throttled { .. })
    ));
    // The real user, from a clean address, signs in.
    assert!(login(&host, "correct horse", ip(9)).is_ok());
    // A new attacker address gets one guess, then waits.
    assert!(matches!(
        login(&host, "guess", ip(10)),
        Err(AuthError::BadLogin)
    ));
    assert!(matches!(
        login(&host, "guess", ip(10)),
        Err(AuthError::Throttled { .. })
    ));
}

#[test]
fn bearer_token_failures_lock_the_address_not_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    let (_, secret) = host
        .tokens()
        .unwrap()
        .add(&TokenSpec::agent("bot"))
        .unwrap();
    for i in 0..FREE_PER_ADDRESS {
        let wrong = format!("cap_wrong_{i}");
        assert!(matches!(
            host.authenticate_from(Credential::Bearer(&wrong), ip(1)),
            Err(AuthError::Unknown)
        ));
    }
    assert!(matches!(
        host.authenticate_from(Credential::Bearer("cap_wrong"), ip(1)),
        Err(AuthError::Throttled { .. })
    ));
    // The valid token works from elsewhere, and a success does not unlock the address.
    assert!(
        host.authenticate_from(Credential::Bearer(&secret), ip(2))
            .is_ok()
    );
    assert!(matches!(
        host.authenticate_from(Credential::Bearer(&secret), ip(1)),
        Err(AuthError::Throttled { .. })
    ));
}
