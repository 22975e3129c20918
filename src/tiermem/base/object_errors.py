"""Object-store failures read from the libraries' text: a missing bucket, refused credentials, a wrong region, an
endpoint that cannot be reached or that did not answer in time. LanceDB and obstore (both the Rust ``object_store`` crate) report them as a Rust
debug dump of ~1 KB (the request, its retries, the store's XML answer, the crate's source line); ``explain`` turns
the recognised ones into a sentence that names the problem and the setting to check, so the dump stays in the log.
"""

from __future__ import annotations

import re

DOCS = "docs/configuration.md#object-storage"
DEADLINES_DOCS = "docs/configuration.md#deadlines"
_CODE = re.compile(r"<Code>([A-Za-z]+)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")
_URL = re.compile(r"\b(https?://[^/\s,()\"'\\]+)")

MISSING_BUCKET = ("NoSuchBucket", "ContainerNotFound")  # S3 (and compatibles), Azure
BAD_CREDENTIALS = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "InvalidClientTokenId",
    "AuthenticationFailed",  # Azure
    "InvalidAuthenticationInfo",
)
NOT_ALLOWED = ("AccessDenied", "AllAccessDisabled", "AuthorizationPermissionMismatch", "AuthorizationFailure")
WRONG_REGION = ("AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint")
FAILURES = MISSING_BUCKET + BAD_CREDENTIALS + NOT_ALLOWED + WRONG_REGION  # answers no retry changes
# No connection was made: nothing the request carried reached the store.
NOT_CONNECTED = (
    "connection refused",
    "dns error",
    "failed to lookup address",
    "name or service not known",
    "tcp connect error",
    "no route to host",
    "network is unreachable",
)
# The request failed without the store's answer, at connecting or after (LanceDB's text says only "error sending
# request", for a refused connection and a timeout alike).
UNREACHABLE = (*NOT_CONNECTED, "error sending request", "connection reset")
# A request that got no answer in time (reqwest's "kind: Timeout ... TimedOut", the OS's "timed out"): the endpoint
# took the connection and went quiet (hung, overloaded, a stalled proxy), or the network dropped the packets.
TIMED_OUT = ("kind: timeout", "timedout", "timed out", "deadline has elapsed")
_WRITE_REQUEST = re.compile(r"\b(?:performing|method:) (?:PUT|POST|DELETE)\b")
# What a write whose request failed unanswered is said to have left (``outcome_unknown``)
UNKNOWN_OUTCOME = (
    "Whether it was written is not known: the store may have received the request and apply it even so (a store "
    "that answers late applies it late). Look for it (read or search) before repeating the call."
)


def is_object_uri(uri: str) -> bool:
    """True for an object-store URI (``s3://...``, ``gs://...``, ``az://...``), False for a directory."""
    return "://" in uri and not uri.startswith("file://")


def _bucket(uri: str) -> str:
    return uri.partition("://")[2].split("/", 1)[0]


def _credential_settings(uri: str) -> str:
    scheme = uri.partition("://")[0].lower()
    if scheme in ("gs", "gcs"):
        return "service_account under [storage_options], or GOOGLE_APPLICATION_CREDENTIALS"
    if scheme in ("az", "abfs", "abfss", "azure"):
        return "account_name / account_key under [storage_options], or the AZURE_STORAGE_* environment variables"
    return (
        "aws_access_key_id / aws_secret_access_key under [storage_options], or (when those are not set) "
        "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ~/.aws or the instance role"
    )


def store_code(text: str) -> str | None:
    """The error code the object store answered with (``NoSuchBucket``, ``InvalidAccessKeyId``...), if the text
    carries its answer."""
    m = _CODE.search(text)
    return m.group(1) if m else None


def explain(uri: str, text: str) -> str | None:
    """A sentence saying what went wrong with the object store at ``uri`` and what to change, or None when ``text``
    (a library error's) is none of the failures recognised here. The sentence ends without a full stop."""
    code = store_code(text)
    url = _URL.search(text)
    endpoint = url.group(1) if url else "its endpoint"
    see = f"see {DOCS}"
    if code in MISSING_BUCKET:
        return (
            f"the bucket {_bucket(uri)!r} does not exist at {endpoint} ({code}): create it, or correct the bucket "
            f"in `uri` (and the endpoint, aws_endpoint under [storage_options]); {see}"
        )
    if code in BAD_CREDENTIALS:
        return (
            f"the object store at {endpoint} refused the credentials ({code}): check {_credential_settings(uri)}; {see}"
        )
    if code in NOT_ALLOWED:
        return (
            f"the object store at {endpoint} does not let these credentials use the bucket {_bucket(uri)!r} ({code}): "
            "grant them listing, reading, writing and deleting objects under the prefix (S3: s3:ListBucket, "
            f"s3:GetObject, s3:PutObject, s3:DeleteObject), or use other credentials ({_credential_settings(uri)}); "
            f"{see}"
        )
    if code in WRONG_REGION:
        return (
            f"the bucket {_bucket(uri)!r} is not in the region the request was signed for ({code}): set region under "
            f"[storage_options] (or AWS_REGION) to the bucket's region; {see}"
        )
    slow = (
        "a slow store or link needs longer deadlines: read_timeout (or timeout) under [storage_options], see "
        f"{DEADLINES_DOCS}"
    )
    if timed_out(text):
        return (
            f"the object store's endpoint {endpoint} did not answer in time (a request timed out): is it up and not "
            f"overloaded, and is the network up? {slow[0].upper()}{slow[1:]}"
        )
    lowered = text.lower()
    if any(marker in lowered for marker in NOT_CONNECTED):
        return (
            f"cannot reach the object store's endpoint {endpoint}: is it running, and is the address right? Check "
            f"aws_endpoint under [storage_options] (or AWS_ENDPOINT_URL) and the network; {see}"
        )
    if any(marker in lowered for marker in UNREACHABLE):  # LanceDB's text: refused, reset or timed out
        return (
            f"cannot reach the object store's endpoint {endpoint}, or it did not answer in time: is it running and not "
            "overloaded, and is the address right? Check aws_endpoint under [storage_options] (or AWS_ENDPOINT_URL) "
            f"and the network; {slow}"
        )
    if code is not None:  # another answer of the store: its code and message say more than the dump around them
        message = _MESSAGE.search(text)
        said = f" ({message.group(1)})" if message else ""
        return f"the object store at {endpoint} answered {code}{said}: check `uri` and [storage_options]; {see}"
    return None


def timed_out(text: str) -> bool:
    """True when a library error's ``text`` says a request to the store timed out."""
    lowered = text.lower()
    return any(marker in lowered for marker in TIMED_OUT)


def outcome_unknown(text: str) -> bool:
    """True when ``text`` (a library error's) says a request that writes (PUT, POST, DELETE) failed without the
    store's answer, and not for want of a connection: the store may have received it whole, and one that answers
    late (a hung store that resumes) applies it late. A LanceDB commit reported as failed that way was seen
    committed ten minutes later, so "nothing was written" would not be true (``UNKNOWN_OUTCOME`` is)."""
    if store_code(text) is not None or not _WRITE_REQUEST.search(text):
        return False
    lowered = text.lower()
    return not any(marker in lowered for marker in NOT_CONNECTED)


def short(text: str) -> str:
    """A library error's text without obstore's "Debug source:" dump, on one line, at most 300 characters."""
    head = text.split("\n\nDebug source:", 1)[0]
    return " ".join(head.split())[:300]
