//! Plain-text tables for the terminal: columns as wide as their widest cell.

use chrono::{DateTime, Utc};

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, two spaces between columns, the last column unpadded.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let last = row.len().saturating_sub(1);
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i == last {
                        cell.clone()
                    } else {
                        format!("{cell:<width$}", width = widths[i])
                    }
                })
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// A time as a person reads it in a table, in UTC.
pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// `-` for what is not there.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The first line of a message, cut to `max` characters.
pub fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell() {
        let mut table = Table::new(&["ID", "STATE", "NOTE"]);
        table.row(vec!["a".into(), "running".into(), "".into()]);
        table.row(vec!["bbbb".into(), "held".into(), "why".into()]);
        assert_eq!(
            table.render(),
            "ID    STATE    NOTE\na     running\nbbbb  held     why\n"
        );
        assert_eq!(short("one\ntwo", 10), "one");
        assert_eq!(short("abcdefgh", 5), "abcd…");
    }
}
