//! Using PocketLLM from your own program: load a model by alias or path, stream a chat reply.
//!
//! `cargo run --release -p pocket-embedding-app -- [MODEL] [QUESTION]`

use std::io::Write;

use pocket_kernels::DeviceKind;
use pocket_models::chat_template::ChatMessage;
use pocket_models::sampling::SamplingParams;
use pocket_models::{Engine, GenerateParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .unwrap_or_else(|| "smollm2-135m-instruct".into());
    let question = args
        .next()
        .unwrap_or_else(|| "What is the capital of France?".into());
    let device = match std::env::var("POCKET_DEVICE") {
        Ok(d) => d.parse::<DeviceKind>()?,
        Err(_) => DeviceKind::Cpu,
    };

    let mut engine = Engine::builder().model(model).device(device).build()?;
    let params = GenerateParams {
        max_tokens: 96,
        sampling: SamplingParams::greedy(),
        ..Default::default()
    };
    let messages = [ChatMessage::user(question)];
    let mut out = std::io::stdout();
    for event in engine.chat(&messages, params)? {
        let event = event?;
        write!(out, "{}", event.text)?;
        out.flush()?;
        if let (Some(finish), Some(usage)) = (event.finish, event.usage) {
            eprintln!(
                "\n[{finish:?}: {} prompt tokens, {} completion tokens]",
                usage.prompt_tokens, usage.completion_tokens
            );
        }
    }
    Ok(())
}
