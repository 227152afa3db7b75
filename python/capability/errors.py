"""The exceptions of the governed runtime. Each carries the runtime's error code."""

from __future__ import annotations

__all__ = ["CapabilityError", "Denied", "ApprovalRequired", "NotFound"]


class CapabilityError(Exception):
    """A refusal or failure of the runtime.

    ``code`` is the runtime's error code (``PERMISSION_DENIED``, ``APPROVAL_REQUIRED``,
    ``NOT_FOUND``, ``INVALID_INPUT``, ``EXECUTION_FAILED``, ``POLICY_ERROR``,
    ``GOVERNANCE_FAILED``, ...); ``receipt_id`` names the receipt of a failed governed
    invoke when one was kept; ``details`` is the error's structured details (a dict or None).
    """

    def __init__(self, message: str, *, code: str, receipt_id: str | None = None,
                 details: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.receipt_id = receipt_id
        self.details = details

    def __str__(self) -> str:
        return self.message


class Denied(CapabilityError):
    """A policy denied the action (``code == "PERMISSION_DENIED"``).

    ``stage`` is ``before_capability`` (nothing ran) or ``after_capability`` (it ran; the
    output is withheld). ``decision_code`` is the policy's own code (``deny(code=...)``).
    """

    def __init__(self, message: str, *, code: str = "PERMISSION_DENIED", reason: str | None = None,
                 policy_name: str | None = None, policy_version: str | None = None,
                 decision_code: str | None = None, action_id: str | None = None,
                 stage: str | None = None, receipt_id: str | None = None,
                 details: object = None) -> None:
        super().__init__(message, code=code, receipt_id=receipt_id, details=details)
        self.reason = reason
        self.policy_name = policy_name
        self.policy_version = policy_version
        self.decision_code = decision_code
        self.action_id = action_id
        self.stage = stage


class ApprovalRequired(CapabilityError):
    """A human must approve first (``code == "APPROVAL_REQUIRED"``).

    Approve with ``host.approve(approval_id, by=...)`` as another principal, then retry the
    same call with ``approval_token=``.
    """

    def __init__(self, message: str, *, code: str = "APPROVAL_REQUIRED",
                 approval_id: str | None = None, reason: str | None = None,
                 policy_name: str | None = None, receipt_id: str | None = None,
                 details: object = None) -> None:
        super().__init__(message, code=code, receipt_id=receipt_id, details=details)
        self.approval_id = approval_id
        self.reason = reason
        self.policy_name = policy_name


class NotFound(CapabilityError, KeyError):
    """No capability of that name (``code == "NOT_FOUND"``); nothing was audited."""

    def __init__(self, message: str, *, code: str = "NOT_FOUND", receipt_id: str | None = None,
                 details: object = None) -> None:
        CapabilityError.__init__(self, message, code=code, receipt_id=receipt_id, details=details)

    def __str__(self) -> str:
        return self.message
