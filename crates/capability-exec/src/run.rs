//! One run of capability code behind a boundary: the hook it calls ([`Op`]), what it is
//! given ([`Invocation`]), and what came back ([`RunOutcome`]).

use std::time::Duration;

use capability_core::plan::Plan;
use capability_core::receipt::Receipt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The capability hook a run calls. Plan, verify and rollback cross the same boundary as
/// execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Plan,
    Execute,
    Verify,
    Rollback,
}

impl Op {
    /// The wire name (`plan`, `execute`, `verify`, `rollback`).
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Plan => "plan",
            Op::Execute => "execute",
            Op::Verify => "verify",
            Op::Rollback => "rollback",
        }
    }
}

/// One call into a capability: what every boundary's request envelope carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    pub op: Op,
    pub input: Value,
    /// The authorized plan (for execute, verify and rollback).
    pub plan: Option<Value>,
    /// The output being verified (or rolled back).
    pub output: Option<Value>,
    /// The receipt of the execution being rolled back.
    pub receipt: Option<Value>,
}

impl Invocation {
    /// A call of `op` with `input` and nothing else.
    pub fn new(op: Op, input: Value) -> Self {
        Invocation {
            op,
            input,
            plan: None,
            output: None,
            receipt: None,
        }
    }

    pub fn plan(input: Value) -> Self {
        Invocation::new(Op::Plan, input)
    }

    pub fn execute(input: Value) -> Self {
        Invocation::new(Op::Execute, input)
    }

    pub fn verify(input: Value, output: Value) -> Self {
        Invocation {
            output: Some(output),
            ..Invocation::new(Op::Verify, input)
        }
    }

    pub fn rollback(input: Value, receipt: Value) -> Self {
        Invocation {
            receipt: Some(receipt),
            ..Invocation::new(Op::Rollback, input)
        }
    }

    pub fn with_plan(mut self, plan: Value) -> Self {
        self.plan = Some(plan);
        self
    }

    /// The `execute` of an authorized plan: its input, and the plan.
    pub fn executing(plan: &Plan) -> Self {
        Invocation::execute(plan.input.clone()).with_plan(plan.to_value())
    }

    /// The `verify` of an authorized plan's output.
    pub fn verifying(plan: &Plan, output: Value) -> Self {
        Invocation::verify(plan.input.clone(), output).with_plan(plan.to_value())
    }

    /// The `rollback` of a receipt: its input and output, and the receipt (no plan).
    pub fn rolling_back(receipt: &Receipt) -> Self {
        Invocation {
            output: receipt.output.clone(),
            ..Invocation::rollback(receipt.input.clone(), receipt.to_value())
        }
    }
}

/// The result of a run that entered its boundary: the hook's output or why the run failed
/// (`E`, the boundary's error), and the report of the boundary crossed (`R`).
#[derive(Clone, Debug)]
pub struct RunOutcome<E, R> {
    /// The hook's output, or why the run failed (guest error, limit, protocol violation,
    /// manifest mismatch, ...).
    pub result: Result<Value, E>,
    /// False when the guest said it has no hook for the op (`plan` then yields `{}`, `verify`
    /// yields `null`). A boundary whose protocol cannot say so (WASM) reports true.
    pub hook_present: bool,
    /// The boundary used and the limits actually applied, for the receipt.
    pub boundary: R,
    /// Wall time of the run.
    pub duration: Duration,
    /// The end (process sandbox) or the start (WASM) of the guest's stderr, for diagnostics.
    /// Not part of the result.
    pub stderr: String,
    /// Fuel the guest burnt, on a boundary that meters it (WASM).
    pub fuel_consumed: Option<u64>,
}

impl<E, R> RunOutcome<E, R> {
    /// Whether the hook produced an output.
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}
