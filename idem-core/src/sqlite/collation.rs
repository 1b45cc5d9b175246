//! The collation each column of a SQLite table declares (`slug TEXT COLLATE NOCASE`), read from
//! the table's `CREATE TABLE` text in `sqlite_master`: no pragma reports it (`table_xinfo` does
//! not, and `index_xinfo` only for a column some index holds), while that text is what SQLite
//! itself parses again each time it opens the database, so it is the definition.

/// Whether the collation `name` compares byte for byte.
pub(super) fn is_bytewise(name: &str) -> bool {
    name.eq_ignore_ascii_case(super::table::WORDS.bytewise)
}

/// One token of a statement, as far as telling its column definitions apart goes.
#[derive(Debug, PartialEq)]
enum Token {
    /// A name, a keyword or a quoted text; `quoted`: written in quotes, so never a keyword.
    Word {
        text: String,
        quoted: bool,
    },
    Open,
    Close,
    Comma,
    /// Anything else: an operator, a `.`.
    Other,
}

impl Token {
    /// Whether this is the keyword `keyword` (written without quotes, in any case).
    fn is_keyword(&self, keyword: &str) -> bool {
        matches!(self, Token::Word { text, quoted: false } if text.eq_ignore_ascii_case(keyword))
    }
}

/// `sql` as tokens, without its whitespace and comments.
fn tokens(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut tokens = Vec::new();
    let mut at = 0;
    while let Some(&c) = chars.get(at) {
        at += 1;
        match c {
            '-' if chars.get(at) == Some(&'-') => {
                while chars.get(at).is_some_and(|&c| c != '\n') {
                    at += 1;
                }
            }
            '/' if chars.get(at) == Some(&'*') => {
                at += 1;
                while at < chars.len() && !(chars[at] == '*' && chars.get(at + 1) == Some(&'/')) {
                    at += 1;
                }
                at += 2;
            }
            '(' => tokens.push(Token::Open),
            ')' => tokens.push(Token::Close),
            ',' => tokens.push(Token::Comma),
            '\'' | '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                let mut text = String::new();
                while let Some(&next) = chars.get(at) {
                    at += 1;
                    if next != close {
                        text.push(next);
                    } else if close != ']' && chars.get(at) == Some(&close) {
                        // A quote written twice stands for itself.
                        text.push(close);
                        at += 1;
                    } else {
                        break;
                    }
                }
                tokens.push(Token::Word { text, quoted: true });
            }
            c if is_word(c) => {
                let start = at - 1;
                while chars.get(at).is_some_and(|&c| is_word(c)) {
                    at += 1;
                }
                tokens.push(Token::Word {
                    text: chars[start..at].iter().collect(),
                    quoted: false,
                });
            }
            c if c.is_whitespace() => {}
            _ => tokens.push(Token::Other),
        }
    }
    tokens
}

/// The keywords that open a table constraint rather than a column definition.
const TABLE_CONSTRAINTS: [&str; 5] = ["CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"];

/// The collation each column of the `CREATE TABLE` statement `create_table` declares, as
/// `(column, collation)`; a column declaring none compares byte for byte and is left out. Only
/// a `COLLATE` among the column's own constraints counts, not one inside an expression of its
/// (a `CHECK`, a `DEFAULT`), which is in parentheses.
pub(super) fn declared_collations(create_table: &str) -> Vec<(String, String)> {
    let tokens = tokens(create_table);
    let Some(open) = tokens.iter().position(|token| *token == Token::Open) else {
        return Vec::new();
    };
    // `CREATE TABLE … AS SELECT …` declares no collation.
    if tokens[..open].iter().any(|token| token.is_keyword("AS")) {
        return Vec::new();
    }
    let mut declared = Vec::new();
    let mut definition: Vec<&Token> = Vec::new();
    let mut depth = 0_usize;
    for token in &tokens[open + 1..] {
        match token {
            Token::Open => depth += 1,
            Token::Close if depth > 0 => depth -= 1,
            Token::Close | Token::Comma if depth == 0 => {
                declared.extend(column_collation(&definition));
                definition.clear();
                if *token == Token::Close {
                    break;
                }
            }
            _ if depth == 0 => definition.push(token),
            _ => {}
        }
    }
    declared
}

/// The column a definition (its tokens outside parentheses) defines, and the collation it
/// declares; `None` for a table constraint or a column declaring none.
fn column_collation(definition: &[&Token]) -> Option<(String, String)> {
    let Some(Token::Word { text: column, .. }) = definition.first() else {
        return None;
    };
    if TABLE_CONSTRAINTS
        .iter()
        .any(|keyword| definition[0].is_keyword(keyword))
    {
        return None;
    }
    // Of several, SQLite keeps the last.
    let collation = definition.windows(2).rev().find_map(|pair| match pair {
        [keyword, Token::Word { text, .. }] if keyword.is_keyword("COLLATE") => Some(text),
        _ => None,
    })?;
    Some((column.clone(), collation.clone()))
}

#[cfg(test)]
mod tests {
    use super::{declared_collations as declared, is_bytewise};

    fn pair(column: &str, collation: &str) -> (String, String) {
        (column.to_owned(), collation.to_owned())
    }

    #[test]
    fn reads_each_columns_own_collation() {
        assert_eq!(
            declared(
                "CREATE TABLE \"posts\" (\n  \"_id\" TEXT PRIMARY KEY,\n  slug VARCHAR(20) NOT \
                 NULL COLLATE nocase, -- a comment, COLLATE RTRIM\n  [la,ng] TEXT COLLATE \
                 \"RTRIM\" /* COLLATE x */, `a``b` TEXT COLLATE BINARY, 'quoted' TEXT COLLATE \
                 NOCASE,\n  body TEXT CHECK (body <> 'x' COLLATE NOCASE) DEFAULT ('y' COLLATE \
                 NOCASE),\n  CONSTRAINT k UNIQUE (slug COLLATE NOCASE, \"la,ng\")\n) WITHOUT \
                 ROWID"
            ),
            vec![
                pair("slug", "nocase"),
                pair("la,ng", "RTRIM"),
                pair("a`b", "BINARY"),
                pair("quoted", "NOCASE"),
            ]
        );
    }

    #[test]
    fn a_table_made_from_a_select_or_without_collations_declares_none() {
        assert!(declared("CREATE TABLE t AS SELECT lower(x) AS y FROM (SELECT 1 AS x)").is_empty());
        assert!(declared("CREATE TABLE t (a TEXT, b INTEGER DEFAULT (1), UNIQUE (a))").is_empty());
        assert!(declared("").is_empty());
    }

    #[test]
    fn only_binary_compares_byte_for_byte_in_any_case() {
        assert!(is_bytewise("binary") && is_bytewise("BINARY"));
        assert!(!is_bytewise("NOCASE") && !is_bytewise("RTRIM"));
    }
}
