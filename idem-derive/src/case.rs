//! serde's `rename_all` rules, so the derive knows the names serde stores; and the snake_case
//! of the type name that is the default collection.

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum RenameRule {
    Lower,
    Upper,
    Pascal,
    Camel,
    Snake,
    ScreamingSnake,
    Kebab,
    ScreamingKebab,
}

pub const RULES: &[(&str, RenameRule)] = &[
    ("lowercase", RenameRule::Lower),
    ("UPPERCASE", RenameRule::Upper),
    ("PascalCase", RenameRule::Pascal),
    ("camelCase", RenameRule::Camel),
    ("snake_case", RenameRule::Snake),
    ("SCREAMING_SNAKE_CASE", RenameRule::ScreamingSnake),
    ("kebab-case", RenameRule::Kebab),
    ("SCREAMING-KEBAB-CASE", RenameRule::ScreamingKebab),
];

impl RenameRule {
    pub fn from_name(name: &str) -> Option<Self> {
        RULES
            .iter()
            .find(|(rule_name, _)| *rule_name == name)
            .map(|(_, rule)| *rule)
    }

    /// The stored name of a field written in snake_case, exactly as serde computes it.
    pub fn apply_to_field(self, field: &str) -> String {
        match self {
            RenameRule::Lower | RenameRule::Snake => field.to_owned(),
            RenameRule::Upper | RenameRule::ScreamingSnake => field.to_ascii_uppercase(),
            RenameRule::Pascal => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            RenameRule::Camel => {
                let pascal = RenameRule::Pascal.apply_to_field(field);
                let mut chars = pascal.chars();
                match chars.next() {
                    Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                    None => pascal,
                }
            }
            RenameRule::Kebab => field.replace('_', "-"),
            RenameRule::ScreamingKebab => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

/// `BlogPost` → `blog_post`: the default collection name.
pub fn snake_case(type_name: &str) -> String {
    let mut snake = String::new();
    for (index, ch) in type_name.char_indices() {
        if index > 0 && ch.is_uppercase() {
            snake.push('_');
        }
        snake.push(ch.to_ascii_lowercase());
    }
    snake
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_rules_match_serde() {
        let cases = [
            (RenameRule::Camel, "published_at", "publishedAt"),
            (RenameRule::Pascal, "published_at", "PublishedAt"),
            (RenameRule::ScreamingSnake, "published_at", "PUBLISHED_AT"),
            (RenameRule::Kebab, "published_at", "published-at"),
            (RenameRule::ScreamingKebab, "published_at", "PUBLISHED-AT"),
            (RenameRule::Lower, "published_at", "published_at"),
            (RenameRule::Camel, "id", "id"),
        ];
        for (rule, field, stored) in cases {
            assert_eq!(rule.apply_to_field(field), stored, "{rule:?} of {field}");
        }
    }

    #[test]
    fn snake_case_of_type_names() {
        assert_eq!(snake_case("Post"), "post");
        assert_eq!(snake_case("BlogPost"), "blog_post");
    }
}
