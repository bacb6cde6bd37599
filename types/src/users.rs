//! Dashboard accounts as the Users page shows them (issue 40): made, reset,
//! promoted, demoted and disabled by an admin there or on the command line;
//! a password an admin sets is shown once and changed at first sign-in.

use serde::{Deserialize, Serialize};

use crate::auth::Role;

/// A user as the list shows one: never a password or its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub role: Role,
    pub disabled: bool,
    /// Signs in with a one-time password an admin set; must choose its own.
    pub must_change_password: bool,
    #[serde(with = "crate::time::wire")]
    pub created_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, with = "crate::time::wire_opt")]
    pub last_login_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A one-time password an admin set (a new account, or a reset), shown
/// this once; the user changes it at first sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OneTimePassword {
    pub user: UserRow,
    pub password: String,
}

/// How a person reads the pages, kept with their account: the zone their
/// browser reported (once known), whether they read times in it or in UTC,
/// and their theme. The server renders every page with them, so the first
/// paint already shows their times and colours.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preferences {
    pub time_zone: Option<String>,
    pub clock: crate::time::Clock,
    pub theme: Theme,
}

impl Preferences {
    /// The zone the pages show times in.
    pub fn zone(&self) -> crate::time::Zone {
        use crate::time::{Clock, Zone};
        match (self.clock, self.time_zone.as_deref().and_then(Zone::named)) {
            (Clock::Local, Some(zone)) => zone,
            _ => Zone::UTC,
        }
    }
}

/// A person's colours: the system's (`prefers-color-scheme`), or chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Theme {
    #[default]
    System,
    Light,
    Dark,
}

impl Theme {
    pub fn as_str(self) -> &'static str {
        match self {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    pub fn parse(text: &str) -> Option<Theme> {
        match text {
            "system" => Some(Theme::System),
            "light" => Some(Theme::Light),
            "dark" => Some(Theme::Dark),
            _ => None,
        }
    }
}
