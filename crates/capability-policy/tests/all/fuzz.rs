//! Property-based fuzzing of the policy layer's parsers of outside input: Cedar policy files
//! (and their annotations), policy test fixtures, approval tokens, signed audit checkpoints,
//! and audit journal lines. No input may panic or hang (inputs are bounded); a token or a
//! checkpoint changed anywhere is refused.
//!
//! Runs 256 cases per property (64 for Cedar) with a fixed seed; longer, by hand:
//! `PROPTEST_CASES=100000 cargo test --release -p capability-policy --test all -- fuzz::`
//! (`PROPTEST_RNG_SEED=<n>` picks another seed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_policy::approvals::{HostKey, decode_token};
use capability_policy::audit::AuditEvent;
use capability_policy::cedar::{self, CedarPolicies, PolicyFile};
use capability_policy::checkpoint::Checkpoint;
use capability_test_support::fuzz::config;
use proptest::prelude::*;

/// Cedar-looking text: policy keywords, annotations (the project reads @id, @reason,
/// @decision, ...), operators, entity references, strings and noise.
fn cedarish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("permit".to_string()),
        Just("forbid".to_string()),
        Just("(principal, action, resource)".to_string()),
        Just("(principal == Agent::\"a\", action == Action::\"tool_call\", resource)".to_string()),
        Just("when { ".to_string()),
        Just("unless { ".to_string()),
        Just(" }".to_string()),
        Just(";".to_string()),
        Just("\n".to_string()),
        Just("@id(\"p1\")".to_string()),
        Just("@id(\"p1\")".to_string()),
        Just("@reason(\"why\")".to_string()),
        Just("@decision(\"approval_required\")".to_string()),
        Just("@decision(\"bogus\")".to_string()),
        Just("@obligations(\"[1,\")".to_string()),
        Just("context.input has text".to_string()),
        Just("context.input.text like \"*x*\"".to_string()),
        Just(" && ".to_string()),
        Just(" || ".to_string()),
        Just("resource == Capability::\"text/slugify\"".to_string()),
        Just("decimal(\"1.5\")".to_string()),
        Just("ip(\"10.0.0.1\")".to_string()),
        Just("\"unterminated".to_string()),
        Just("// comment\n".to_string()),
        "[a-z(){};:=\"@ ]{1,6}",
        "\\PC{1,2}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

/// A well-formed policy as the base of mutations.
const POLICY: &str = "@id(\"p\")\n@reason(\"r\")\n@decision(\"approval_required\")\nforbid(principal, action == Action::\"tool_call\", resource == Capability::\"text/slugify\")\nwhen { context.input has text && context.input.text like \"*secret*\" };\npermit(principal, action, resource);\n";

proptest! {
    #![proptest_config(config(64, 0x5eed_ceda))]

    #[test]
    fn cedar_files_never_panic(text in cedarish(), other in cedarish()) {
        let files = [PolicyFile::new("a.cedar", text), PolicyFile::new("b.cedar", other)];
        let _ = CedarPolicies::from_sources(&files);
        let report = cedar::validate_sources(&files, None);
        for d in &report.diagnostics {
            prop_assert!(d.line >= 1 && d.column >= 1, "{:?}", d);
        }
    }

    #[test]
    fn mutated_policies_never_panic(at in 0usize..400, cut in 0usize..40, insert in "\\PC{0,8}") {
        let mut text = POLICY.to_string();
        let at = (0..=at.min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let end = (at..=(at + cut).min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(at);
        text.replace_range(at..end, &insert);
        let files = [PolicyFile::new("m.cedar", text)];
        let _ = CedarPolicies::from_sources(&files);
        let _ = cedar::validate_sources(&files, None);
    }
}

proptest! {
    #![proptest_config(config(256, 0x5eed_ceda))]

    #[test]
    fn fixtures_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048), text in "\\PC{0,200}") {
        let _ = capability_policy::fixtures::parse_fixtures(&bytes, "f.json");
        let _ = capability_policy::fixtures::parse_fixtures(text.as_bytes(), "f.json");
        let wrapped = format!("[{{\"name\": \"x\", \"request\": {text}, \"expect\": \"allow\"}}]");
        let _ = capability_policy::fixtures::parse_fixtures(wrapped.as_bytes(), "f.json");
    }

    #[test]
    fn approval_tokens_never_panic(
        token in "\\PC{0,300}",
        dots in "[A-Za-z0-9_.-]{0,200}",
    ) {
        let key = HostKey::from_seed([7; 32]);
        let _ = decode_token(&token, &key.verifying_key());
        let _ = decode_token(&format!("cap1.{dots}"), &key.verifying_key());
    }

    #[test]
    fn checkpoints_never_panic_and_a_changed_one_is_refused(
        seq in any::<u64>(),
        counter in any::<u64>(),
        hash in "[0-9a-f]{0,64}",
        flip in 0usize..200,
        junk in "\\PC{0,100}",
    ) {
        let key = HostKey::from_seed([9; 32]);
        let checkpoint = Checkpoint {
            seq,
            hash,
            counter,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            key_id: key.key_id(),
        };
        let doc = checkpoint.sign(&key);
        prop_assert_eq!(Checkpoint::verify(&doc, &key).unwrap(), checkpoint);
        // Change one member's text: refused.
        let text = capability_core::json::to_js_string(&doc);
        let at = flip % text.len();
        if let Some(c) = text[at..].chars().next().filter(|c| c.is_ascii_alphanumeric()) {
            let other = if c == '1' { '2' } else { '1' };
            let changed = format!("{}{}{}", &text[..at], other, &text[at + 1..]);
            if let Ok(v) = capability_core::json::parse(changed.as_bytes()) {
                prop_assert!(Checkpoint::verify(&v, &key).is_err(), "{}", changed);
            }
        }
        if let Ok(v) = capability_core::json::parse(junk.as_bytes()) {
            prop_assert!(Checkpoint::verify(&v, &key).is_err());
        }
    }

    #[test]
    fn audit_journal_lines_never_panic(line in "\\PC{0,400}", bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        for text in [line.into_bytes(), bytes] {
            if let Ok(v) = capability_core::json::parse_record(&text) {
                let _ = AuditEvent::from_json(&v);
            }
        }
    }
}

/// The conversion of numbers into Cedar, against the README's guard: any number above the
/// threshold, written any way JSON allows (digits, fractions, exponents, beyond every Cedar
/// range), is refused; numbers Cedar holds exactly at or below it are not.
mod numbers {
    use std::sync::Arc;

    use capability_policy::cedar::{CedarPolicies, PolicyFile};
    use capability_policy::*;
    use capability_test_support::fuzz::config;
    use proptest::prelude::*;

    const GUARD: &str = r#"@id("allow") permit(principal, action, resource);
@id("guard") forbid(principal, action, resource) when { context.input has amount && context.input.amount > 1000 };
@id("guard-usd") forbid(principal, action, resource) when { context.input has usd && context.input.usd.greaterThan(decimal("1000.0")) };"#;

    fn engine() -> PolicyEngine {
        let engine = PolicyEngine::new();
        let cedar = CedarPolicies::from_sources(&[PolicyFile::new("g.cedar", GUARD)]).unwrap();
        engine.add_source(Arc::new(cedar));
        engine
    }

    fn denied(engine: &PolicyEngine, key: &str, text: &str) -> Option<(f64, bool)> {
        let input: serde_json::Value =
            serde_json::from_str(&format!("{{\"{key}\": {text}}}")).ok()?;
        let x = input[key].as_f64()?;
        let cap = Arc::new(GovernedCapability::new("pay", CapabilityKind::Tool));
        let action = AgentAction::new(ActionType::ToolCall, cap, "bot").input(input);
        let ctx = PolicyContext::new(action, Stage::BeforeCapability);
        Some((x, engine.evaluate(&ctx).unwrap().is_denied()))
    }

    fn number_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| format!("{x:?}")),
            any::<i64>().prop_map(|i| i.to_string()),
            any::<u64>().prop_map(|u| u.to_string()),
            (any::<u32>(), -330i32..330).prop_map(|(m, e)| format!("{m}e{e}")),
            (0u64..100_000_000, 0u32..100_000).prop_map(|(i, f)| format!("{i}.{f:05}")),
            (1u64..2000, 0u32..10_000).prop_map(|(i, f)| format!("{i}.{f:04}")),
        ]
    }

    proptest! {
        #![proptest_config(config(512, 0x0dec_0001))]

        #[test]
        fn no_number_above_the_threshold_passes_the_guard(text in number_text()) {
            let engine = engine();
            for key in ["amount", "usd"] {
                if let Some((x, denied)) = denied(&engine, key, &text)
                    && x > 1000.0
                {
                    prop_assert!(denied, "{key} = {text} passed the guard");
                }
            }
        }
    }
}

/// The redactor (issue 30, item 5): a text that names the member a pointer redacts, in
/// whatever surroundings or split across text blocks, is never taken for harmless text.
mod redaction {
    use capability_policy::pointer::hidden_in_text;
    use capability_test_support::fuzz::config;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        #![proptest_config(config(256, 0x0dec_0005))]

        #[test]
        fn text_that_names_the_member_is_never_delivered_past_a_redaction(
            name in "[a-z]{3,10}", before in "\\PC{0,20}", after in "\\PC{0,20}", cut in 0usize..30,
        ) {
            let pointer = format!("/{name}");
            let text = format!("{before}{}{after}", name.to_uppercase());
            prop_assert!(hidden_in_text(&json!(text), &pointer));
            // Split across two text blocks at any point.
            let at = text.char_indices().map(|(i, _)| i).nth(cut.min(text.chars().count())).unwrap_or(text.len());
            let (a, b) = text.split_at(at);
            prop_assert!(hidden_in_text(&json!([a, b]), &pointer));
            // Inside an MCP result without structured content.
            let result = json!({"content": [{"type": "resource", "resource": {"text": text}}]});
            prop_assert!(hidden_in_text(&result, &pointer));
        }
    }
}
