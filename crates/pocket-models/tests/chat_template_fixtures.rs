//! Every chat template in ../shared/data/chat-templates (and the python-compat probe) must render
//! byte-identically to Python jinja2 as transformers runs it. Expected renderings come from
//! scripts/chat_templates.py (tests/data/chat_templates/expected.json).

use std::path::PathBuf;

use pocket_models::chat_template::{ChatTemplate, ChatTemplateError, DateTime, RenderOptions};
use serde_json::Value;

fn shared_dir() -> PathBuf {
    match std::env::var_os("POCKET_SHARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    }
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat_templates")
}

/// The date the generator pinned `strftime_now` to (2026-02-03T04:05:06).
const FIXED_NOW: DateTime = DateTime {
    year: 2026,
    month: 2,
    day: 3,
    hour: 4,
    minute: 5,
    second: 6,
};

fn template_source(name: &str) -> String {
    let p = if name.starts_with("python-compat") || name.starts_with("gguf-") {
        data_dir().join(name)
    } else {
        shared_dir().join("data/chat-templates").join(name)
    };
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("missing template {}: {e}", p.display()))
}

#[test]
fn templates_match_python_jinja2() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir().join("expected.json")).expect("expected.json missing"),
    )
    .expect("expected.json is not JSON");
    assert_eq!(fixture["meta"]["fixed_now"], "2026-02-03T04:05:06");
    let cases = fixture["cases"].as_array().expect("cases");
    // every shared template is covered
    let mut shared: Vec<String> = std::fs::read_dir(shared_dir().join("data/chat-templates"))
        .expect("chat templates folder missing")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".jinja"))
        .collect();
    shared.sort();
    assert!(!shared.is_empty());
    for t in &shared {
        assert!(
            cases.iter().any(|c| c["template"] == t.as_str()),
            "template {t} has no expected renderings"
        );
    }

    let mut failures = Vec::new();
    let mut passed = 0;
    for c in cases {
        let name = c["template"].as_str().unwrap();
        let label = format!(
            "{name} / {} / agp={}",
            c["conversation"].as_str().unwrap(),
            c["add_generation_prompt"]
        );
        let tpl = match ChatTemplate::with_now(&template_source(name), Some(FIXED_NOW)) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{label}: compile error {e}"));
                continue;
            }
        };
        let opts = RenderOptions {
            add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
            tools: c["tools"].as_array().cloned(),
            documents: None,
            bos_token: c["bos_token"].as_str().map(str::to_string),
            eos_token: c["eos_token"].as_str().map(str::to_string),
            extra: c["extra"].as_object().cloned().unwrap_or_default(),
        };
        let got = tpl.render_json(&c["messages"], &opts);
        match (c.get("output").and_then(Value::as_str), got) {
            (Some(want), Ok(got)) if want == got => passed += 1,
            (Some(want), Ok(got)) => failures.push(format!(
                "{label}: output differs\n--- python\n{want}\n--- ours\n{got}\n---"
            )),
            (Some(_), Err(e)) => failures.push(format!("{label}: we failed: {e}")),
            (None, Ok(got)) => failures.push(format!(
                "{label}: python failed ({}), we rendered {got:?}",
                c["message"]
            )),
            (None, Err(e)) => {
                // raise_exception messages must match exactly
                if c["error"] == "raised" {
                    match &e {
                        ChatTemplateError::Raised(m) if c["message"] == m.as_str() => passed += 1,
                        other => failures.push(format!(
                            "{label}: want raise {:?}, got {other}",
                            c["message"]
                        )),
                    }
                } else {
                    passed += 1;
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(passed > 100, "only {passed} cases");
}

#[test]
fn openai_string_arguments_render_like_objects() {
    use pocket_models::chat_template::parse_tool_call_arguments;
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir().join("expected.json")).expect("expected.json missing"),
    )
    .unwrap();
    let case = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["template"] == "Qwen-Qwen2.5-7B-Instruct.jinja"
                && c["conversation"] == "tool_call_roundtrip"
                && c["add_generation_prompt"] == true
        })
        .expect("qwen tool-call case");
    // the same conversation as an OpenAI client sends it: arguments as a JSON string
    let mut messages = case["messages"].clone();
    for m in messages.as_array_mut().unwrap() {
        if let Some(calls) = m.get_mut("tool_calls") {
            for c in calls.as_array_mut().unwrap() {
                let args = c["function"]["arguments"].to_string();
                c["function"]["arguments"] = Value::String(args);
            }
        }
    }
    parse_tool_call_arguments(&mut messages);
    assert_eq!(messages, case["messages"]);
    let tpl = ChatTemplate::new(&template_source("Qwen-Qwen2.5-7B-Instruct.jinja")).unwrap();
    let opts = RenderOptions {
        add_generation_prompt: true,
        tools: case["tools"].as_array().cloned(),
        bos_token: Some("<|bos|>".into()),
        eos_token: Some("<|eos|>".into()),
        ..Default::default()
    };
    assert_eq!(
        tpl.render_json(&messages, &opts).unwrap(),
        case["output"].as_str().unwrap()
    );
}
