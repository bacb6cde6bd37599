//! Where a command that exists both ways runs: on the database this
//! machine's config names (local), or over a running server's API (remote).

use clap::Args;

use super::remote::{RemoteError, Target};

#[derive(Args, Debug, Clone, Copy, Default)]
pub struct Place {
    /// Run on the database the config names, even with --url or
    /// REPLAYSAFE_URL set [default when neither is]
    #[arg(long, global = true, conflicts_with = "remote")]
    pub local: bool,
    /// Run over the API of the server at --url / REPLAYSAFE_URL [default
    /// when one is set], with --token / REPLAYSAFE_TOKEN
    #[arg(long, global = true)]
    pub remote: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    Local,
    Remote,
}

impl Place {
    /// Remote when forced, or when a server is named (`--url` or a
    /// non-empty REPLAYSAFE_URL) and local is not forced; local otherwise.
    /// A token alone names no server: it may be set for other commands.
    pub fn resolve(self, target: &Target) -> Runs {
        let named = target.url.as_deref().is_some_and(|u| !u.trim().is_empty());
        if self.remote || (named && !self.local) {
            Runs::Remote
        } else {
            Runs::Local
        }
    }

    /// For an operation that only the database can do: refuses `--remote`.
    pub fn local_only(self, what: &str) -> Result<(), RemoteError> {
        if self.remote {
            return Err(RemoteError::BadArgument(format!(
                "{what} runs on the database only (no API does it): drop --remote"
            )));
        }
        Ok(())
    }
}
