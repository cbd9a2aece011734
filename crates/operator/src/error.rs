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
