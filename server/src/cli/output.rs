//! How the commands print: tables aligned by display width, JSON, and
//! colour only on a terminal (and never with `NO_COLOR` set).

use std::io::IsTerminal;

use replaysafe_types::states::Outcome;

/// Prints rows under a header, each column as wide as its widest cell as a
/// terminal shows it: colour escapes take no room, wide characters two.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    print!("{}", table_text(header, rows));
}

fn table_text(header: &[&str], rows: &[Vec<String>]) -> String {
    let width = |cell: &str| console::measure_text_width(cell);
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                out.push_str(&" ".repeat(widths[i] - width(cell) + 2));
            }
        }
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
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

#[cfg(test)]
mod tests {
    use super::table_text;

    #[test]
    fn columns_line_up_as_a_terminal_shows_them() {
        let rows = vec![
            vec!["\x1b[32mclaimed\x1b[0m".to_owned(), "a".to_owned()],
            vec!["dead".to_owned(), "b".to_owned()],
            vec!["日本".to_owned(), "c".to_owned()],
        ];
        let text = table_text(&["OUTCOME", "KEY"], &rows);
        let columns: Vec<usize> = text
            .lines()
            .map(|line| {
                let plain = console::strip_ansi_codes(line);
                let before = plain.rsplit_once("  ").expect("two columns").0;
                console::measure_text_width(before) + 2
            })
            .collect();
        assert_eq!(columns, vec![9, 9, 9, 9], "{text}");
    }
}
