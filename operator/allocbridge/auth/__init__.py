"""Who may do what: the authorization hook every API handler calls, and its simplest form.

The real implementation (TokenReview + SubjectAccessReview) plugs in behind the same
`Authorizer` protocol; handlers never know which one they talk to.
"""

from allocbridge.auth.base import (
    ALL_NAMESPACES,
    ALLOC_EXEC,
    ALLOC_LIFECYCLE,
    ALLOC_NODE_EXEC,
    JOB_SUBMIT,
    READ_FS,
    READ_JOB,
    READ_LOGS,
    AllowAll,
    Authorizer,
    AuthUnavailableError,
    Caller,
    Capability,
    GrantsAtOnce,
    PermissionDeniedError,
    extract_token,
)

__all__ = [
    "ALLOC_EXEC",
    "ALLOC_LIFECYCLE",
    "ALLOC_NODE_EXEC",
    "ALL_NAMESPACES",
    "JOB_SUBMIT",
    "READ_FS",
    "READ_JOB",
    "READ_LOGS",
    "AllowAll",
    "AuthUnavailableError",
    "Authorizer",
    "Caller",
    "Capability",
    "GrantsAtOnce",
    "PermissionDeniedError",
    "extract_token",
]
