//! What the fake does as a model in an agent's tool loop, the same on every conversation
//! endpoint (chat `messages`, Responses `input`, Anthropic `messages`):
//!
//! * the last user text saying `call <name>` of a listed tool asks for that tool (the first
//!   such mention, as whole words);
//! * a conversation that ends with a tool's result has had its tool call answered: the model
//!   then answers text naming the result (see [`answer_text`]) instead of calling a tool
//!   again, unless `tool_choice` forces a call.
//!
//! So a framework's loop against the fake takes two model calls: one that calls the tool the
//! prompt names, one that answers with what the tool returned.

use crate::task::{ECHO_CHARS, truncate};

/// The listed tool whose `call <name>` comes first in the text (as whole words).
pub(crate) fn mentioned_tool(text: &str, names: &[&str]) -> Option<String> {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    names
        .iter()
        .filter_map(|name| {
            let needle = format!("call {name}");
            text.match_indices(&needle)
                .find(|(at, _)| {
                    let before = text[..*at].chars().next_back();
                    let after = text[at + needle.len()..].chars().next();
                    !before.is_some_and(word) && !after.is_some_and(word)
                })
                .map(|(at, _)| (at, *name))
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, name)| name.to_owned())
}

/// The tool an unforced answer calls: the one the user text mentions, unless the
/// conversation already ends with a tool's result (the loop's call was answered).
pub(crate) fn unforced_call(
    user_text: &str,
    names: &[&str],
    results: Option<&[String]>,
) -> Option<String> {
    if results.is_some() {
        return None;
    }
    mentioned_tool(user_text, names)
}

/// The answer's text: `fake answer: <the last user text>`, and after tool results
/// ` (tool result: <each result, joined by "; ">)`, each part cut to [`ECHO_CHARS`].
pub(crate) fn answer_text(user_text: &str, results: Option<&[String]>) -> String {
    let asked = truncate(user_text, ECHO_CHARS);
    match results {
        None => format!("fake answer: {asked}"),
        Some(results) => format!(
            "fake answer: {asked} (tool result: {})",
            truncate(&results.join("; "), ECHO_CHARS)
        ),
    }
}

/// The text of a tool result's content: a string, or the `text` of its parts (OpenAI's
/// content parts, Anthropic's text blocks), else the JSON text of whatever it is.
pub(crate) fn result_text(content: &serde_json::Value) -> String {
    use serde_json::Value;
    match content {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_mention_asks_for_a_tool_until_its_result_is_there() {
        let names = ["lookup", "lookup_all"];
        assert_eq!(
            unforced_call("please call lookup_all", &names, None).as_deref(),
            Some("lookup_all")
        );
        let results = vec!["42".to_owned()];
        assert_eq!(
            unforced_call("please call lookup_all", &names, Some(&results)),
            None
        );
        assert_eq!(unforced_call("recall lookup", &names, None), None);
    }

    #[test]
    fn the_answer_after_a_tool_names_its_results() {
        assert_eq!(answer_text("hi", None), "fake answer: hi");
        let results = vec!["7 kg".to_owned(), "red".to_owned()];
        assert_eq!(
            answer_text("weigh the fox", Some(&results)),
            "fake answer: weigh the fox (tool result: 7 kg; red)"
        );
        let long = "x".repeat(ECHO_CHARS + 10);
        let cut = answer_text("q", Some(&[long]));
        assert_eq!(
            cut.len(),
            "fake answer: q (tool result: )".len() + ECHO_CHARS
        );
    }

    #[test]
    fn a_results_text_is_its_string_or_its_text_parts() {
        assert_eq!(result_text(&json!("7 kg")), "7 kg");
        assert_eq!(
            result_text(
                &json!([{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}])
            ),
            "a b"
        );
        assert_eq!(result_text(&json!({"kg": 7})), "{\"kg\":7}");
        assert_eq!(result_text(&json!(null)), "");
    }
}
