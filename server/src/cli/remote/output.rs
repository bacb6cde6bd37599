//! How the remote commands print: aligned tables, JSON, and colour only on
//! a terminal (and never with `NO_COLOR` set).

use std::io::IsTerminal;

use replaysafe_types::states::Outcome;

/// Prints rows under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c.to_string()
                } else {
                    format!("{c:<width$}", width = widths[i])
                }
            })
            .collect();
        println!("{}", text.join("  "));
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

pub fn json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialize")
    );
}

/// Colours for stdout, when it is a terminal that wants them.
pub struct Paint {
    on: bool,
}

impl Paint {
    pub fn stdout() -> Self {
        Self {
            on: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// An outcome in its colour: claimed green, refusals and rejects red,
    /// duplicates dim, in progress yellow.
    pub fn outcome(&self, outcome: Outcome) -> String {
        let code = match outcome {
            Outcome::Claimed => "32",
            Outcome::Completed => "2",
            Outcome::InProgress => "33",
            Outcome::Dead | Outcome::Rejected | Outcome::Unavailable | Outcome::Refused => "31",
        };
        let outcome = outcome.as_str();
        if self.on {
            format!("\x1b[{code}m{outcome}\x1b[0m")
        } else {
            outcome.to_owned()
        }
    }
}

pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}
