//! One engine step: batch the active sequences, run the model, sample, check stops.

use super::{Engine, FinishReason, Result, TokenEvent};
use crate::model::SeqId;

impl Engine {
    /// Runs one forward over the active sequences (new prompts whole, decoding ones one token
    /// each, as many as fit `max_batch_tokens` and the cache) and returns one event per sequence
    /// that ran. Finished sequences are dropped and their cache blocks freed.
    pub fn step(&mut self) -> Result<Vec<(SeqId, TokenEvent)>> {
        let mut chosen: Vec<SeqId> = Vec::new();
        let (mut tokens, mut blocks) = (0usize, 0usize);
        let mut events = Vec::new();
        for (&id, s) in &self.seqs {
            let n = s.pending.len();
            let need = self.cache.blocks_needed(id, n);
            if tokens > 0
                && (tokens + n > self.max_batch_tokens || blocks + need > self.cache.free_blocks())
            {
                continue;
            }
            tokens += n;
            blocks += need;
            chosen.push(id);
        }
        if chosen.is_empty() {
            return Ok(events);
        }
        // Sequences that cannot grow (context full) finish with Length before the forward.
        let limit = self.cache.config().max_seq_len;
        chosen.retain(|id| {
            let s = &self.seqs[id];
            let fits = self.cache.seq_len(*id).unwrap_or(0) + s.pending.len() <= limit;
            if !fits {
                events.push((*id, finish_event(FinishReason::Length)));
            }
            fits
        });
        for (id, _) in &events {
            self.seqs.remove(id);
            self.cache.free_sequence(*id);
        }
        if chosen.is_empty() {
            return Ok(events);
        }
        let decode = self.decode_graph_eligible(&chosen);
        let entries: Vec<(SeqId, Vec<u32>)> = chosen
            .iter()
            .map(|id| {
                (
                    *id,
                    std::mem::take(&mut self.seqs.get_mut(id).unwrap().pending),
                )
            })
            .collect();
        let refs: Vec<(SeqId, &[u32])> =
            entries.iter().map(|(id, t)| (*id, t.as_slice())).collect();
        let plan = match self.cache.plan(&refs) {
            Ok(p) => p,
            Err(e) => {
                // Nothing was reserved: put the tokens back and report the failure for all.
                for (id, t) in entries {
                    self.seqs.remove(&id);
                    self.cache.free_sequence(id);
                    let _ = t;
                    events.push((id, finish_event(FinishReason::Error(e.to_string()))));
                }
                return Ok(events);
            }
        };
        if decode {
            self.graphs.last_was_decode = true;
            match self.decode_step(&plan) {
                Ok(picks) => {
                    for ((id, _), picked) in entries.iter().zip(picks) {
                        let ev = self.advance(*id, picked);
                        let done = ev.finish.is_some();
                        events.push((*id, ev));
                        if done {
                            self.seqs.remove(id);
                            self.cache.free_sequence(*id);
                        }
                    }
                }
                Err(e) => {
                    for (id, _) in entries {
                        self.seqs.remove(&id);
                        self.cache.free_sequence(id);
                        events.push((id, finish_event(FinishReason::Error(e.to_string()))));
                    }
                }
            }
            return Ok(events);
        }
        self.graphs.last_was_decode = false;
        self.graphs.note_eager(plan.num_tokens(), plan.num_seqs());
        let dev = self.model.device().clone();
        let logits = match self.model.forward(&plan, &mut self.cache) {
            Ok(t) => dev.read_f32(t)?,
            Err(e) => {
                for (id, _) in entries {
                    self.seqs.remove(&id);
                    self.cache.free_sequence(id);
                    events.push((id, finish_event(FinishReason::Error(e.to_string()))));
                }
                return Ok(events);
            }
        };
        let vocab = self.model.info().vocab_size;
        for (i, (id, _)) in entries.iter().enumerate() {
            let mut row = logits[i * vocab..(i + 1) * vocab].to_vec();
            let ev = self.sample_one(*id, &mut row);
            let done = ev.finish.is_some();
            events.push((*id, ev));
            if done {
                self.seqs.remove(id);
                self.cache.free_sequence(*id);
            }
        }
        Ok(events)
    }

    /// Samples the next token of `id` from its logits and advances its stop/text state.
    fn sample_one(&mut self, id: SeqId, row: &mut [f32]) -> TokenEvent {
        let Some(s) = self.seqs.get_mut(&id) else {
            return finish_event(FinishReason::Error(format!("unknown sequence {id}")));
        };
        let picked = match s.sampler.sample(row, &s.tokens) {
            Ok(p) => p,
            Err(e) => return finish_event(FinishReason::Error(e.to_string())),
        };
        self.advance(id, picked)
    }

    /// Appends a picked token to `id` and advances its stop/text state.
    fn advance(&mut self, id: SeqId, picked: crate::sampling::SampledToken) -> TokenEvent {
        let tok = self.tokenizer.as_ref();
        let Some(s) = self.seqs.get_mut(&id) else {
            return finish_event(FinishReason::Error(format!("unknown sequence {id}")));
        };
        let t = picked.id;
        s.tokens.push(t);
        s.generated += 1;
        let mut ev = TokenEvent {
            token: Some(t),
            logprob: Some(picked.logprob),
            top_logprobs: picked.top_logprobs,
            text: String::new(),
            finish: None,
        };
        if s.stop.is_stop_token(t) {
            ev.text = s.stop.finish();
            ev.finish = Some(FinishReason::Stop);
            return ev;
        }
        let piece = match tok.map(|k| s.decoder.push(k, t)) {
            Some(Ok(p)) => p,
            Some(Err(e)) => return finish_event(FinishReason::Error(e.to_string())),
            None => String::new(),
        };
        let st = s.stop.push(t, &piece);
        ev.text = st.text;
        if st.stop.is_some() {
            ev.finish = Some(FinishReason::Stop);
        } else if s.generated >= s.params.max_tokens {
            if let Some(Ok(rest)) = tok.map(|k| s.decoder.finish(k)) {
                ev.text.push_str(&s.stop.push_text(&rest).text);
            }
            ev.text.push_str(&s.stop.finish());
            ev.finish = Some(FinishReason::Length);
        } else {
            s.pending.push(t);
        }
        ev
    }
}

/// An event that only ends a sequence.
fn finish_event(reason: FinishReason) -> TokenEvent {
    TokenEvent {
        token: None,
        logprob: None,
        top_logprobs: Vec::new(),
        text: String::new(),
        finish: Some(reason),
    }
}
