//! How the rows of a text file are laid out: a TSV under a header naming its columns (every GLUE task's), CoLA's
//! headerless TSV, JSONL whose keys are the same names, or text lines (`text`, or `text<TAB>pair`). Each row gives a
//! text, its pair and its label as written; a row qdq cannot read whole is an error, never half a pair.

/// Names of the text column (or JSONL key), in the order they are taken (a header with `question1` and `question` is
/// QQP's pair): GLUE's (SST-2 and CoLA `sentence`, RTE / WNLI / MNLI / STS-B `sentence1`, QQP `question1`, QNLI
/// `question`, MRPC `#1 String`), SNLI / ANLI's `premise`, a cross-encoder's `query`.
const TEXT_COLUMNS: [&str; 8] =
    ["text", "sentence1", "question1", "#1 string", "premise", "query", "question", "sentence"];
/// Names of the pair column, in order; the text column taken is never its own pair (QNLI: `question` and
/// `sentence`).
const PAIR_COLUMNS: [&str; 8] =
    ["text_pair", "sentence2", "question2", "#2 string", "hypothesis", "passage", "sentence_pair", "sentence"];
/// Names of the label column (MRPC `Quality`, QQP `is_duplicate`, MNLI `gold_label`, STS-B `score`).
const LABEL_COLUMNS: [&str; 6] = ["label", "labels", "gold_label", "quality", "is_duplicate", "score"];

/// Text, pair and label column of a TSV header or of a JSONL line's keys.
pub(crate) type Columns = (usize, Option<usize>, Option<usize>);

/// One row as written: its text, its pair and its label.
pub(crate) type Row = (String, Option<String>, Option<String>);

/// The columns a header (or a JSONL line's keys) names: `Ok(None)` when no name is one qdq knows (the line is not a
/// header); an error when it names none qdq reads a text from, or a second text it cannot pair with the first.
fn columns_of(cols: &[String]) -> std::result::Result<Option<Columns>, String> {
    let known = |c: &String| [&TEXT_COLUMNS[..], &PAIR_COLUMNS, &LABEL_COLUMNS].iter().any(|l| l.contains(&c.as_str()));
    if !cols.iter().any(known) {
        return Ok(None);
    }
    let find = |names: &[&str], not: Option<usize>| {
        names.iter().find_map(|n| cols.iter().position(|c| c == n).filter(|k| Some(*k) != not))
    };
    let Some(text) = find(&TEXT_COLUMNS, None) else {
        return Err(format!(
            "names the columns [{}], none of which qdq reads a text from ({}): rename the text column",
            cols.join(", "),
            TEXT_COLUMNS.join(", ")
        ));
    };
    let pair = find(&PAIR_COLUMNS, Some(text));
    let label = find(&LABEL_COLUMNS, None);
    // A second text-like column qdq did not take as the pair would be dropped without a word.
    let dropped: Vec<&String> = cols
        .iter()
        .enumerate()
        .filter(|(k, c)| Some(*k) != pair && *k != text && TEXT_COLUMNS.contains(&c.as_str()))
        .map(|(_, c)| c)
        .collect();
    if pair.is_none() && !dropped.is_empty() {
        return Err(format!(
            "names the text column `{}` and also [{}], which qdq does not pair with it: give the pair column one of \
             the names {}",
            cols[text],
            dropped.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
            PAIR_COLUMNS.join(", ")
        ));
    }
    Ok(Some((text, pair, label)))
}

/// The columns of a TSV whose first line is `header`: `Ok(None)` when it is not a header (no cell names a text,
/// pair or label column: the file is text lines); an error when it is one qdq cannot read a text from, or when it
/// names a pair column beside a text column it cannot pair it with (never half a pair).
pub(crate) fn tsv_columns(header: &str) -> std::result::Result<Option<Columns>, String> {
    let cols: Vec<String> = header.split('\t').map(|c| c.trim().to_ascii_lowercase()).collect();
    if cols.len() < 2 {
        return Ok(None);
    }
    columns_of(&cols).map_err(|e| format!("the header {e}"))
}

/// CoLA's train and dev files have no header: a source code, the label (0 / 1), the original author's mark (empty,
/// `*`, `?`, `??`, `#`) and the sentence. The columns when `line` is such a row.
fn cola_columns(line: &str) -> Option<Columns> {
    let cells: Vec<&str> = line.split('\t').collect();
    let source = |c: &str| !c.is_empty() && !c.contains(char::is_whitespace);
    let mark = |c: &str| c.len() <= 2 && c.chars().all(|ch| matches!(ch, '*' | '?' | '#'));
    (cells.len() == 4 && source(cells[0]) && matches!(cells[1], "0" | "1") && mark(cells[2])).then_some((
        3,
        None,
        Some(1),
    ))
}

/// How a text file's rows are laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Layout {
    /// JSON objects, one per line, whose keys name their text, pair and label as a TSV header does.
    Jsonl,
    /// Tab-separated cells (under a header, or CoLA's headerless rows).
    Tsv(Columns),
    /// `text`, or `text<TAB>pair`.
    Lines,
}

/// The layout of `content` (JSONL when `jsonl`) and how many lines its header takes; an error (with its line) when
/// the first line is a header qdq cannot read a text from, or a headerless row of more than two cells.
pub(crate) fn layout(content: &str, jsonl: bool) -> std::result::Result<(Layout, usize), (usize, String)> {
    if jsonl {
        return Ok((Layout::Jsonl, 0));
    }
    let Some((i, first)) = content.lines().enumerate().find(|(_, l)| !l.trim().is_empty()) else {
        return Ok((Layout::Lines, 0));
    };
    if let Some(columns) = tsv_columns(first).map_err(|e| (i + 1, e))? {
        return Ok((Layout::Tsv(columns), i + 1));
    }
    if let Some(columns) = cola_columns(first) {
        return Ok((Layout::Tsv(columns), i));
    }
    Ok((Layout::Lines, i))
}

/// The rows of `content` after its header, each with its 1-based line number (empty lines skipped); a row's error
/// says what is wrong with it (the caller names the file and the line).
pub(crate) fn rows(
    content: &str,
    jsonl: bool,
) -> std::result::Result<impl Iterator<Item = (usize, std::result::Result<Row, String>)> + '_, (usize, String)> {
    let (layout, header) = layout(content, jsonl)?;
    Ok(content
        .lines()
        .enumerate()
        .skip(header)
        .filter(|(_, l)| !l.trim().is_empty())
        .map(move |(i, line)| (i + 1, parse_line(line, layout))))
}

/// One line's text, pair and label (as written) in `layout`.
fn parse_line(line: &str, layout: Layout) -> std::result::Result<Row, String> {
    match layout {
        Layout::Jsonl => json_row(line),
        Layout::Tsv((t, p, l)) => {
            let cells: Vec<&str> = line.split('\t').collect();
            let cell = |k: usize| {
                cells.get(k).copied().ok_or_else(|| format!("has {} columns, fewer than the header", cells.len()))
            };
            let label = l.map(|k| cell(k).map(|v| v.trim().to_owned())).transpose()?;
            Ok((cell(t)?.to_owned(), p.map(cell).transpose()?.map(str::to_owned), label))
        }
        Layout::Lines => {
            let cells: Vec<&str> = line.split('\t').collect();
            match cells[..] {
                [a] => Ok((a.to_owned(), None, None)),
                [a, b] => Ok((a.to_owned(), Some(b.to_owned()), None)),
                _ => Err(format!(
                    "holds {} tab-separated cells, and the file has no header naming them: a text line holds a \
                     text, or a text and its pair separated by one tab; give the file a header naming its columns \
                     ({} for the text, {} for the pair, {} for the label)",
                    cells.len(),
                    TEXT_COLUMNS.join(" / "),
                    PAIR_COLUMNS.join(" / "),
                    LABEL_COLUMNS.join(" / ")
                )),
            }
        }
    }
}

/// A JSONL line: an object whose keys name the text, pair and label as a TSV header does (`text` / `text_pair` /
/// `label`, or GLUE's `sentence1` / `sentence2` / `label` as Hugging Face `datasets` writes them).
fn json_row(line: &str) -> std::result::Result<Row, String> {
    let expected = "expected an object such as {\"text\": ..., \"text_pair\": ..., \"label\": N or \"name\"}";
    let object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).map_err(|e| format!("{e} ({expected})"))?;
    let keys: Vec<String> = object.keys().map(|k| k.trim().to_ascii_lowercase()).collect();
    let Some((t, p, l)) = columns_of(&keys).map_err(|e| format!("the object {e}"))? else {
        return Err(format!("has the keys [{}], none of which names a text ({expected})", keys.join(", ")));
    };
    let values: Vec<&serde_json::Value> = object.values().collect();
    let text = |k: usize, what: &str| match values[k] {
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Null if what == "pair" => Ok(None),
        v => Err(format!("`{}` is {v}: expected the {what} as a string", keys[k])),
    };
    let label = match l.map(|k| values[k]) {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.trim().to_owned()),
        Some(v @ serde_json::Value::Number(_)) => Some(v.to_string()),
        Some(v) => return Err(format!("label {v}: expected a class number or name")),
    };
    let pair = p.map(|k| text(k, "pair")).transpose()?.flatten();
    Ok((text(t, "text")?.unwrap_or_default(), pair, label))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(content: &str, jsonl: bool) -> std::result::Result<Vec<Row>, (usize, String)> {
        rows(content, jsonl)?.map(|(i, r)| r.map_err(|e| (i, e))).collect()
    }

    fn row(a: &str, b: Option<&str>, l: Option<&str>) -> Row {
        (a.to_owned(), b.map(str::to_owned), l.map(str::to_owned))
    }

    /// Issue 77: every GLUE task's header as GLUE's files write it, read for its text, pair and label.
    #[test]
    fn glue_headers_give_their_text_pair_and_label() {
        let cases: [(&str, Columns); 9] = [
            ("sentence\tlabel", (0, None, Some(1))),
            ("index\tsentence", (1, None, None)),
            ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", (3, Some(4), Some(0))),
            ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", (3, Some(4), Some(5))),
            (
                "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
                (7, Some(8), Some(9)),
            ),
            ("index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label", (4, Some(5), Some(7))),
            (
                "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t\
                 sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
                (8, Some(9), Some(15)),
            ),
            ("index\tsentence1\tsentence2\tlabel", (1, Some(2), Some(3))),
            ("index\tquestion\tsentence\tlabel", (1, Some(2), Some(3))),
        ];
        for (header, columns) in cases {
            assert_eq!(tsv_columns(header), Ok(Some(columns)), "{header}");
        }
        // Text lines are not a header.
        assert_eq!(tsv_columns("the cat sat\tit was a mat"), Ok(None));
        assert_eq!(tsv_columns("sentence"), Ok(None));
        // A header with no text column, or two texts that are not a pair: an error, never half a pair.
        let e = tsv_columns("id\tbody\tlabel").unwrap_err();
        assert!(e.contains("[id, body, label]") && e.contains("sentence1"), "{e}");
        let e = tsv_columns("sentence1\tquestion\tlabel").unwrap_err();
        assert!(e.contains("`question`") && e.contains("sentence2"), "{e}");
    }

    /// CoLA's train and dev files have no header: the sentence (4th cell) and the label (2nd) are read, never a
    /// source code as the text; any other headerless row of more than two cells is an error naming its line.
    #[test]
    fn colas_headerless_rows_and_other_cells_without_a_header() {
        let cola = "gj04\t1\t\tOur friends won't buy this analysis.\nclc95\t0\t*\tThe more we study verbs.\n";
        assert_eq!(
            all(cola, false).unwrap(),
            [
                row("Our friends won't buy this analysis.", None, Some("1")),
                row("The more we study verbs.", None, Some("0"))
            ]
        );
        // A row of five cells is no CoLA row, and text lines hold one or two cells.
        let (line, e) = all("a\tb\n\nc\td\te\tf\tg\n", false).unwrap_err();
        assert_eq!(line, 3);
        assert!(e.contains("5 tab-separated cells") && e.contains("sentence1"), "{e}");
        assert_eq!(
            all("hello world\nthe cat\tsat\n", false).unwrap(),
            [row("hello world", None, None), row("the cat", Some("sat"), None)]
        );
        // A header after empty lines is still the header.
        assert_eq!(all("\nsentence\tlabel\nfine\t1\n", false).unwrap(), [row("fine", None, Some("1"))]);
    }

    /// JSONL keys are read as a TSV header is: qdq's own `text` / `text_pair`, and GLUE's names as Hugging Face
    /// `datasets` writes each task (`sentence1` / `sentence2`, `question` / `sentence`, `question1` / `question2`);
    /// keys that name no text, or a text that is not a string, are an error.
    #[test]
    fn jsonl_keys_name_text_pair_and_label_as_headers_do() {
        let lines = concat!(
            r#"{"text": "a", "text_pair": "b", "label": 2}"#,
            "\n",
            r#"{"sentence1": "c", "sentence2": "d", "label": 0, "idx": 7}"#,
            "\n",
            r#"{"question": "e", "sentence": "f", "label": "entailment", "idx": 1}"#,
            "\n",
            r#"{"idx": 3, "question1": "g", "question2": "h", "label": 1}"#,
            "\n",
            r#"{"sentence": "i", "label": null}"#,
            "\n",
            r#"{"text": "j", "text_pair": null}"#,
            "\n",
        );
        assert_eq!(
            all(lines, true).unwrap(),
            [
                row("a", Some("b"), Some("2")),
                row("c", Some("d"), Some("0")),
                row("e", Some("f"), Some("entailment")),
                row("g", Some("h"), Some("1")),
                row("i", None, None),
                row("j", None, None),
            ]
        );
        let (line, e) = all("{\"text\": \"a\"}\n{\"body\": \"x\", \"idx\": 1}\n", true).unwrap_err();
        assert_eq!(line, 2);
        assert!(e.contains("[body, idx]") && e.contains("text_pair"), "{e}");
        let (_, e) = all("{\"sentence1\": 3, \"label\": 1}\n", true).unwrap_err();
        assert!(e.contains("`sentence1` is 3"), "{e}");
        let (_, e) = all("{\"sentence1\": \"a\", \"question\": \"b\"}\n", true).unwrap_err();
        assert!(e.contains("`question`"), "{e}");
        let (_, e) = all("[1, 2]\n", true).unwrap_err();
        assert!(e.contains("expected an object"), "{e}");
    }
}
