#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {object}: {source}")]
    Kube {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0} has no {1}")]
    MissingField(String, &'static str),
    /// An engine generated a kind the operator keeps no cache of (a bug in the wiring).
    #[error("{0} objects are generated but not watched")]
    NotWatched(&'static str),
    #[error("serializing {object}: {source}")]
    Serialize {
        object: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// What kind of failure this is, for the failure metric's `error` label: the apiserver's
    /// reason (`Conflict`, `Invalid`, `Forbidden`, …), `Unreachable` when no answer came, or
    /// the operator's own (`MissingField`, `NotWatched`, `Serialize`, `Listen`). A small, fixed
    /// set: never a name or message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } => match status.code {
                400 => "BadRequest",
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "NotFound",
                409 if status.is_conflict() => "Conflict",
                409 => "AlreadyExists",
                413 => "TooLarge",
                422 => "Invalid",
                429 => "TooManyRequests",
                500..=599 => "ServerError",
                _ => "ApiError",
            },
            Self::Kube { .. } => "Unreachable",
            Self::MissingField(..) => "MissingField",
            Self::NotWatched(_) => "NotWatched",
            Self::Serialize { .. } => "Serialize",
            Self::Listen { .. } => "Listen",
        }
    }

    /// Whether retrying the same request cannot help: the apiserver found it invalid or too
    /// large. Conflicts, throttling, timeouts and unavailability are transient.
    pub fn is_permanent(&self) -> bool {
        self.api_status()
            .is_some_and(|status| matches!(status.code, 400 | 413 | 422))
    }

    /// Whether a write lost a race: the object changed since it was read (409 Conflict).
    pub fn is_lost_race(&self) -> bool {
        self.api_status().is_some_and(|s| s.is_conflict())
    }

    /// Whether a create failed because an object of that name exists.
    pub fn is_already_exists(&self) -> bool {
        self.api_status().is_some_and(|s| s.is_already_exists())
    }

    /// The apiserver's answer, when it refused a request.
    fn api_status(&self) -> Option<&kube::core::Status> {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } => Some(status),
            _ => None,
        }
    }

    /// `object` names the object for the message; only called on failure.
    pub(crate) fn kube(
        action: &'static str,
        object: impl FnOnce() -> String,
    ) -> impl FnOnce(kube::Error) -> Self {
        move |source| Self::Kube {
            action,
            object: object(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, reason: &str) -> Error {
        let status = kube::core::Status {
            code,
            reason: reason.to_owned(),
            ..kube::core::Status::failure("refused", reason)
        };
        Error::kube("writing", || "x".to_owned())(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn failures_are_labelled_by_a_small_fixed_set_of_kinds() {
        assert_eq!(refused(409, "Conflict").kind(), "Conflict");
        assert_eq!(refused(409, "AlreadyExists").kind(), "AlreadyExists");
        assert_eq!(refused(422, "Invalid").kind(), "Invalid");
        assert_eq!(refused(503, "ServiceUnavailable").kind(), "ServerError");
        assert_eq!(Error::NotWatched("X").kind(), "NotWatched");
        assert!(refused(409, "Conflict").is_lost_race());
        assert!(!refused(409, "AlreadyExists").is_lost_race());
    }
}
