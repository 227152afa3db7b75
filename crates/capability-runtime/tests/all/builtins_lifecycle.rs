//! Every case of `builtins.json` through the full runtime lifecycle (plan, authorize under the
//! default deny-all policy, execute, verify, receipt): outputs, output hashes, input-schema
//! refusals with the reference's issue details, and execution failures with a failed receipt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_test_support::vectors::load;

use capability_core::ErrorCode;
use capability_core::receipt::ReceiptStatus;
use capability_runtime::defaults::builtin_capabilities;
use capability_runtime::{CapabilityRuntime, ExecuteOptions, ReceiptQuery};

#[test]
fn builtin_vectors_pass_through_the_runtime() {
    let runtime = CapabilityRuntime::default();
    for cap in builtin_capabilities().unwrap() {
        runtime.register(cap).unwrap();
    }
    let doc = load("builtins.json");
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1156);
    let (mut ok, mut invalid, mut failed) = (0, 0, 0);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let id = case["id"].as_str().unwrap();
        let result = runtime.invoke(id, case["input"].clone(), &ExecuteOptions::default());
        match (&case.get("error"), result) {
            (None, Ok(receipt)) => {
                if receipt.output.as_ref() != Some(&case["output"])
                    || receipt.output_hash.as_deref() != case["outputHash"].as_str()
                {
                    failures.push(format!("case {i} {id}: output {:?}", receipt.output));
                } else {
                    ok += 1;
                }
            }
            (Some(expected), Err(e)) => {
                let code = expected["code"].as_str().unwrap();
                if e.code.as_str() != code {
                    failures.push(format!("case {i} {id}: code {} != {code}", e.code));
                    continue;
                }
                match e.code {
                    ErrorCode::InvalidInput => {
                        if e.details.as_ref() != expected.get("details") {
                            failures.push(format!("case {i} {id}: details {:?}", e.details));
                        } else {
                            invalid += 1;
                        }
                    }
                    ErrorCode::ExecutionFailed => {
                        let receipt_id = e.receipt_id.clone().expect("a failed receipt");
                        let receipt = runtime.get_receipt(&receipt_id).unwrap().unwrap();
                        assert_eq!(receipt.status, ReceiptStatus::Failed);
                        let err = receipt.error.as_ref().unwrap();
                        let same_message = expected["messageIsEngineSpecific"] == true
                            || err.message == expected["message"].as_str().unwrap();
                        if err.name != expected["name"].as_str().unwrap() || !same_message {
                            failures.push(format!("case {i} {id}: error {err:?}"));
                        } else {
                            failed += 1;
                        }
                    }
                    other => failures.push(format!("case {i} {id}: unexpected {other}")),
                }
            }
            (None, Err(e)) => failures.push(format!("case {i} {id}: unexpected error {e:?}")),
            (Some(_), Ok(r)) => failures.push(format!(
                "case {i} {id}: expected an error, got {:?}",
                r.output
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(ok + invalid + failed, cases.len());
    eprintln!(
        "builtins through the runtime: {ok} outputs, {invalid} input refusals, {failed} execution failures"
    );
    // Every attempt that passed planning left a receipt.
    let receipts = runtime.list_receipts(&ReceiptQuery::default()).unwrap();
    assert_eq!(receipts.len(), ok + failed);
}
