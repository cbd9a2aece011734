//! Tables as `kubectl get` prints them, for the commands that print rows.

/// Left-aligned columns separated by three spaces, as `kubectl get` prints them.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        padded.join("   ").trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    if rows.is_empty() {
        out += "(none)\n";
    }
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![
            vec!["a-long-name".to_owned(), "1".to_owned()],
            vec!["b".to_owned(), "22".to_owned()],
        ];
        assert_eq!(
            table(&["NAME", "N"], &rows),
            "NAME          N\na-long-name   1\nb             22\n"
        );
        assert_eq!(table(&["NAME"], &[]), "NAME\n(none)\n");
    }
}
