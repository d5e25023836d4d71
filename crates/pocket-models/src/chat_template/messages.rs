//! Chat messages as templates see them (serialized like the Python dicts transformers passes).

use serde::{Deserialize, Serialize};

/// One chat message; absent fields are absent in the template too (not `None`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Text, or a list of content parts (`{"type": "text", "text": ...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// Reasoning text of an assistant turn (templates that support it print it in think blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls made by an assistant turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// For `tool` messages: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Optional participant or tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Any other fields, passed through to the template unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Message content: plain text or structured parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts, each a JSON object such as `{"type": "text", "text": "..."}`.
    Parts(Vec<serde_json::Value>),
}

/// A tool call inside an assistant message (OpenAI shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id, when the client gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `function` today.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_string()
}

/// Name and arguments of a function call; arguments are a JSON object (or a JSON string).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Function name.
    pub name: String,
    /// Arguments: an object, or a string holding JSON as the OpenAI API sends it.
    pub arguments: serde_json::Value,
}

impl ChatMessage {
    /// A message with plain-text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: Some(MessageContent::Text(content.into())),
            ..Self::default()
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }

    /// A tool result message.
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new("tool", content)
    }
}

/// OpenAI clients send tool-call arguments as a JSON string; chat templates expect an object (they
/// apply `tojson` to it). Parses every `tool_calls[].function.arguments` string that holds a JSON
/// object into that object, as vLLM does before rendering; other strings are left as they are.
pub fn parse_tool_call_arguments(messages: &mut serde_json::Value) {
    let Some(list) = messages.as_array_mut() else {
        return;
    };
    for m in list {
        let Some(calls) = m.get_mut("tool_calls").and_then(|c| c.as_array_mut()) else {
            continue;
        };
        for call in calls {
            let Some(args) = call
                .get_mut("function")
                .and_then(|f| f.get_mut("arguments"))
            else {
                continue;
            };
            if let Some(text) = args.as_str() {
                if let Ok(obj @ serde_json::Value::Object(_)) = serde_json::from_str(text) {
                    *args = obj;
                }
            }
        }
    }
}
