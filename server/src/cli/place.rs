//! Where a command that exists both ways runs: on the database this
//! machine's config names (local), or over a running server's API (remote).

use clap::Args;

use super::remote::{RemoteError, Target};

#[derive(Args, Debug, Clone, Copy, Default)]
pub struct Place {
    /// Run on the database the config names, even with REPLAYSAFE_URL set
    #[arg(long, global = true, conflicts_with = "remote")]
    pub local: bool,
    /// Run over the API of the server at --url / REPLAYSAFE_URL
    #[arg(long, global = true)]
    pub remote: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    Local,
    Remote,
}

impl Place {
    /// Remote when forced, or when a server or a token is named (flag or
    /// environment) and local is not forced; local otherwise.
    pub fn resolve(self, target: &Target) -> Runs {
        if self.remote {
            Runs::Remote
        } else if self.local {
            Runs::Local
        } else if target.url.is_some() || target.token.is_some() {
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
