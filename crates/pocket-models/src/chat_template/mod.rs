//! Chat templates: renders a model's Jinja chat template with minijinja, configured to match
//! Python's jinja2 as Hugging Face transformers runs it (`trim_blocks`, `lstrip_blocks`, loop
//! controls, `raise_exception`, `strftime_now`, its `tojson`, Python string methods and Python
//! `str()` output for `None`, booleans and containers).
//!
//! ```
//! use pocket_models::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
//! let tpl = ChatTemplate::new(
//!     "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}\
//!      {% if add_generation_prompt %}<|assistant|>{% endif %}",
//! )?;
//! let text = tpl.render(
//!     &[ChatMessage::system("Be brief."), ChatMessage::user("Hi!")],
//!     &RenderOptions { add_generation_prompt: true, ..Default::default() },
//! )?;
//! assert_eq!(text, "<|system|>Be brief.\n<|user|>Hi!\n<|assistant|>");
//! # Ok::<(), pocket_models::chat_template::ChatTemplateError>(())
//! ```

mod messages;
mod pycompat;

use std::sync::Arc;

use minijinja::value::Kwargs;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Value};

pub use messages::{
    parse_tool_call_arguments, ChatMessage, FunctionCall, MessageContent, ToolCall,
};
pub use pycompat::DateTime;

const TEMPLATE_NAME: &str = "chat_template";

/// Errors from compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template does not parse.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`.
    #[error("chat template raised: {0}")]
    Raised(String),
    /// Rendering failed for another reason (unknown filter, bad operation, ...).
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// Messages or tools could not be converted to template values.
    #[error("chat template input: {0}")]
    Input(String),
}

/// What a template gets besides `messages`.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// End the prompt with the assistant turn header.
    pub add_generation_prompt: bool,
    /// Tool schemas (OpenAI `tools` entries); `None` is passed to the template as `none`.
    pub tools: Option<Vec<serde_json::Value>>,
    /// Documents for retrieval templates; `None` is passed as `none`.
    pub documents: Option<Vec<serde_json::Value>>,
    /// `bos_token` variable.
    pub bos_token: Option<String>,
    /// `eos_token` variable.
    pub eos_token: Option<String>,
    /// Extra variables (e.g. `enable_thinking`), as transformers' `**kwargs`.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RenderOptions {
    /// Options carrying a tokenizer's `bos_token` / `eos_token` texts.
    pub fn for_tokenizer(tok: &crate::tokenizer::Tokenizer, add_generation_prompt: bool) -> Self {
        Self {
            add_generation_prompt,
            bos_token: tok.bos_token().map(str::to_string),
            eos_token: tok.eos_token().map(str::to_string),
            ..Self::default()
        }
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
}

/// Marker error message prefix for `raise_exception`.
const RAISED: &str = "\u{0}raised:";

impl ChatTemplate {
    /// Compiles a template; `strftime_now` uses the current UTC time.
    pub fn new(source: &str) -> Result<Self, ChatTemplateError> {
        Self::with_now(source, None)
    }

    /// Compiles a template whose `strftime_now` sees a fixed date-time (for reproducible output).
    pub fn with_now(source: &str, now: Option<DateTime>) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            let mut s = String::new();
            pycompat::py_str(value, &mut s, false);
            out.write_str(&s)
                .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
        });
        env.add_filter(
            "tojson",
            |v: Value, ensure_ascii: Option<bool>, kw: Kwargs| {
                pycompat::tojson(&v, ensure_ascii, kw)
            },
        );
        env.add_filter("string", |v: Value| pycompat::string_filter(&v));
        env.add_filter("wordcount", |s: String| pycompat::wordcount(&s));
        // jinja2's `attr` reads Python attributes, which the template's dicts, lists and strings
        // do not have as data: it gives undefined where minijinja's would look the key up
        env.add_filter("attr", |_v: Value, _name: String| Value::UNDEFINED);
        env.add_function("raise_exception", |msg: Value| -> Result<Value, Error> {
            let mut s = String::new();
            pycompat::py_str(&msg, &mut s, false);
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{RAISED}{s}"),
            ))
        });
        let now = Arc::new(now);
        env.add_function("strftime_now", move |fmt: String| -> String {
            now.unwrap_or_else(DateTime::now).strftime(&fmt)
        });
        env.add_template_owned(TEMPLATE_NAME, normalize_source(source))
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        Ok(Self { env })
    }

    /// Renders typed messages.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        opts: &RenderOptions,
    ) -> Result<String, ChatTemplateError> {
        let msgs =
            serde_json::to_value(messages).map_err(|e| ChatTemplateError::Input(e.to_string()))?;
        self.render_json(&msgs, opts)
    }

    /// Renders messages given as JSON (a list of message objects, passed through as they are).
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        opts: &RenderOptions,
    ) -> Result<String, ChatTemplateError> {
        if !messages.is_array() {
            return Err(ChatTemplateError::Input(
                "messages must be a JSON array".into(),
            ));
        }
        let mut ctx = serde_json::Map::new();
        // transformers passes kwargs (special tokens, extras) first; named arguments win.
        if let Some(b) = &opts.bos_token {
            ctx.insert("bos_token".into(), b.clone().into());
        }
        if let Some(e) = &opts.eos_token {
            ctx.insert("eos_token".into(), e.clone().into());
        }
        for (k, v) in &opts.extra {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), messages.clone());
        ctx.insert(
            "tools".into(),
            opts.tools
                .clone()
                .map(serde_json::Value::from)
                .unwrap_or_default(),
        );
        ctx.insert(
            "documents".into(),
            opts.documents
                .clone()
                .map(serde_json::Value::from)
                .unwrap_or_default(),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            opts.add_generation_prompt.into(),
        );
        let tpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(describe(&e)))?;
        tpl.render(Value::from_serialize(&ctx)).map_err(|e| {
            let d = describe(&e);
            match find_raised(&e) {
                Some(msg) => ChatTemplateError::Raised(msg),
                None => ChatTemplateError::Render(d),
            }
        })
    }
}

/// jinja2 drops one trailing newline of the source (keep_trailing_newline=False); minijinja does the
/// same, so the source passes through unchanged except for `{% generation %}` markers, which
/// transformers' AssistantTracker turns into plain blocks.
fn normalize_source(source: &str) -> String {
    let re = [
        "{% generation %}",
        "{%- generation %}",
        "{% generation -%}",
        "{%- generation -%}",
    ];
    let end = [
        "{% endgeneration %}",
        "{%- endgeneration %}",
        "{% endgeneration -%}",
        "{%- endgeneration -%}",
    ];
    let mut s = source.to_string();
    for (a, b) in re.iter().zip(end.iter()) {
        let ra = a.replace("generation", "if true");
        let rb = b.replace("endgeneration", "endif");
        s = s.replace(a, &ra).replace(b, &rb);
    }
    s
}

fn find_raised(e: &Error) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = match err.downcast_ref::<Error>() {
            Some(me) => me.detail().unwrap_or_default().to_string(),
            None => err.to_string(),
        };
        if let Some(pos) = text.find(RAISED) {
            return Some(text[pos + RAISED.len()..].to_string());
        }
        cur = err.source();
    }
    None
}

fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        s.push_str(": ");
        s.push_str(&err.to_string());
        cur = err.source();
    }
    s
}
