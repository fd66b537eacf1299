//! Queries over the model requests a scripted model recorded: the text of a
//! message, the user texts of a conversation, the last thing the user said,
//! the tool results a request carries, and the requests whose conversation holds a given user text. Read-only
//! helpers, so that suites stop carrying their own copies.

use dsh_core::content::joined_text;
use dsh_core::{Message, ModelRequest};

/// The joined text of any message (user, assistant or tool).
pub fn message_text(message: &Message) -> String {
    match message {
        Message::User { content, .. }
        | Message::Assistant { content, .. }
        | Message::Tool { content, .. } => joined_text(content),
    }
}

/// The text of every user message of `messages`, in order.
pub fn user_texts<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Vec<String> {
    messages
        .into_iter()
        .filter_map(|message| match message {
            Message::User { content, .. } => Some(joined_text(content)),
            _ => None,
        })
        .collect()
}

/// The text of the first user message of `request` (empty without one):
/// the agent's own first prompt.
pub fn first_user_text(request: &ModelRequest) -> String {
    user_texts(&request.messages)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Every tool result of `request`, in order: whether it is an error, and
/// its joined text.
pub fn tool_results(request: &ModelRequest) -> Vec<(bool, String)> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((*is_error, joined_text(content))),
            _ => None,
        })
        .collect()
}

/// The text of the last user message of `request` (empty without one).
pub fn last_user_text(request: &ModelRequest) -> String {
    user_texts(&request.messages).pop().unwrap_or_default()
}

/// The requests whose conversation holds a user message saying exactly `text`.
pub fn saying<'a>(requests: &'a [ModelRequest], text: &str) -> Vec<&'a ModelRequest> {
    requests
        .iter()
        .filter(|request| {
            user_texts(&request.messages)
                .iter()
                .any(|said| said == text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use dsh_core::{ContentBlock, MessageSource};

    use super::*;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: None,
            system: String::new(),
            messages: messages.into(),
            tools: Vec::new(),
            max_output_tokens: None,
            reasoning_effort: None,
        }
    }

    fn user(text: &str) -> Message {
        Message::User {
            content: vec![ContentBlock::text(text)],
            source: MessageSource::User,
        }
    }

    #[test]
    fn queries_find_user_texts_in_order() {
        let answer = Message::Assistant {
            content: vec![ContentBlock::text("sure")],
            tool_calls: Vec::new(),
        };
        let first = request(vec![user("one")]);
        let second = request(vec![user("one"), answer.clone(), user("two")]);
        assert_eq!(message_text(&answer), "sure");
        assert_eq!(user_texts(&second.messages), ["one", "two"]);
        assert_eq!(last_user_text(&second), "two");
        assert_eq!(last_user_text(&request(Vec::new())), "");
        let requests = [first, second];
        assert_eq!(saying(&requests, "two").len(), 1);
        assert_eq!(saying(&requests, "one").len(), 2);
        assert!(saying(&requests, "three").is_empty());
    }
}
