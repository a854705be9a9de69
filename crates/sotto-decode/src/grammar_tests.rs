use super::*;
use crate::shortlist::tests::check_against_full;
use crate::tokenizer::tests::toy;

fn filter(src: &str, merges: &[&str]) -> (GrammarFilter, Tokenizer) {
    let tok = toy(merges, 99);
    let g = Grammar::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    (
        GrammarFilter::new(g, "root", 100.0, &tok, true).unwrap(),
        tok,
    )
}

/// The text tokens the grammar lets through after `generated`, as strings.
fn allowed(f: &GrammarFilter, tok: &Tokenizer, generated: &[u32]) -> Vec<String> {
    let rejected = f.rejected(generated);
    (0..tok.eot())
        .filter(|id| rejected.binary_search(id).is_err())
        .map(|id| String::from_utf8_lossy(&tok.decode_bytes(&[id])).into_owned())
        .collect()
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    (0..tok.eot())
        .find(|&i| tok.decode_bytes(&[i]) == text.as_bytes())
        .unwrap()
}

#[test]
fn only_prefixes_of_the_grammar_pass_and_a_complete_one_passes_nothing() {
    let merges = [" yes", " no", " y", "es", " maybe", "yes"];
    let (f, tok) = filter("root ::= \" yes\" | \" no\"\n", &merges);
    assert_eq!(allowed(&f, &tok, &[]), [" ", " yes", " no", " y"]);
    assert_eq!(allowed(&f, &tok, &[id(&tok, " y")]), ["e", "es"]);
    assert_eq!(allowed(&f, &tok, &[id(&tok, " ")]), ["n", "y", "yes"]);
    // Complete: no text token fits (the end of the text is never lowered).
    assert!(allowed(&f, &tok, &[id(&tok, " yes")]).is_empty());
    // A token outside the grammar (a penalized one won): nothing is lowered any more.
    assert!(f.rejected(&[id(&tok, " maybe")]).is_empty());
    // Special tokens (timestamps) between the text tokens change nothing.
    let stamp = tok.timestamp_begin() + 3;
    assert_eq!(
        allowed(&f, &tok, &[stamp, id(&tok, " y"), stamp]),
        ["e", "es"]
    );
}

#[test]
fn classes_ranges_negation_and_repeats() {
    let src = r#"
        # a number, then words of lower-case letters, then a full stop
        root  ::= " " digit+ (" " word)* "."?
        digit ::= [0-9]
        word  ::= [^A-Z .0-9]+   # no capitals
    "#;
    let (f, tok) = filter(src, &[" 12", "ab", "Ab", " ab."]);
    let ids = |s: &[&str]| s.iter().map(|t| id(&tok, t)).collect::<Vec<_>>();
    let after = |s: &[&str]| allowed(&f, &tok, &ids(s));
    assert_eq!(after(&[]), [" ", " 12"]);
    let a = after(&[" 12"]);
    assert!(a.contains(&"7".into()) && a.contains(&" ab.".into()) && a.contains(&".".into()));
    assert!(!a.contains(&"a".into()) && !a.contains(&"Ab".into()));
    let a = after(&[" 12", " ", "ab"]);
    assert!(a.contains(&"ab".into()) && a.contains(&" ".into()) && a.contains(&".".into()));
    assert!(!a.contains(&"Ab".into()) && !a.contains(&"A".into()) && !a.contains(&"7".into()));
    assert!(after(&[" 12", " ab."]).is_empty());
}

#[test]
fn a_character_split_over_tokens_passes_while_it_can_still_match() {
    // é is C3 A9; the toy's tokens are single bytes.
    let (f, tok) = filter("root ::= \"é\" [a-c]", &[]);
    let a = allowed(&f, &tok, &[]);
    let r = f.rejected(&[]);
    assert!(r.binary_search(&0xc3).is_err(), "{a:?}");
    assert!(r.binary_search(&0xc4).is_ok());
    assert!(r.binary_search(&b'e'.into()).is_ok());
    let r = f.rejected(&[0xc3]);
    assert!(r.binary_search(&0xa9).is_err());
    assert!(r.binary_search(&0xa8).is_ok());
    assert_eq!(allowed(&f, &tok, &[0xc3, 0xa9]), ["a", "b", "c"]);
    // A negated class takes any character but its own; a split one only if no completion
    // of it could be excluded (whisper.cpp's rule: C3 could still become é).
    let (f, _) = filter("root ::= [^é]", &[]);
    let r = f.rejected(&[]);
    assert!(r.binary_search(&0xc4).is_err() && r.binary_search(&u32::from(b'x')).is_err());
    assert!(r.binary_search(&0xc3).is_ok());
    let (f, _) = filter("root ::= [^é] \"!\"", &[]);
    let after_c4 = f.rejected(&[0xc4]);
    assert!(
        after_c4.binary_search(&0xa9).is_err() && after_c4.binary_search(&u32::from(b'!')).is_ok()
    );
    assert!(f
        .rejected(&[0xc4, 0xa9])
        .binary_search(&u32::from(b'!'))
        .is_err());
    // An invalid byte sequence never fits.
    assert!(r.binary_search(&0x80).is_ok()); // a continuation byte cannot start a character
}

#[test]
fn the_penalty_lowers_rejected_logits_of_whole_rows() {
    let (f, tok) = filter("root ::= \" no\"", &[" no", " yes"]);
    let mut logits = vec![1.0f32; tok.n_vocab()];
    logits[tok.eot() as usize + 5] = f32::NEG_INFINITY;
    let out = check_against_full(&f, &logits, &[], tok.eot(), 2);
    assert_eq!(out[id(&tok, " no") as usize], 1.0);
    assert_eq!(out[usize::from(b' ')], 1.0);
    assert_eq!(out[id(&tok, " yes") as usize], -99.0);
    assert_eq!(out[usize::from(b'n')], -99.0);
    assert_eq!(out[tok.eot() as usize], 1.0);
    assert_eq!(out[tok.eot() as usize + 5], f32::NEG_INFINITY);
    // Specials the text never holds are masked; timestamps stay unless the text has none.
    let tb = tok.timestamp_begin() as usize;
    assert_eq!(out[tok.no_timestamps() as usize], f32::NEG_INFINITY);
    assert_eq!(out[tb - 1], f32::NEG_INFINITY);
    assert_eq!(out[tb..], vec![1.0; tok.n_vocab() - tb][..]);
    let g = Grammar::parse("root ::= \" no\"").unwrap();
    let plain = GrammarFilter::new(g, "root", 100.0, &tok, false).unwrap();
    let out = check_against_full(&plain, &logits, &[], tok.eot(), 2);
    assert!(out[tb..].iter().all(|x| *x == f32::NEG_INFINITY));
    assert_eq!(out[tok.eot() as usize], 1.0);
}

#[test]
fn ambiguity_keeps_one_stack_per_state() {
    let (f, _) = filter("root ::= (\"a\" | \"a\" | [a])* \"b\"", &[]);
    let generated = vec![u32::from(b'a'); 300];
    let (stacks, _) = f.state(&generated);
    assert!(stacks.len() <= 4, "{}", stacks.len());
    let r = f.rejected(&generated);
    assert!(
        r.binary_search(&u32::from(b'a')).is_err() && r.binary_search(&u32::from(b'b')).is_err()
    );
    assert!(r.binary_search(&u32::from(b'c')).is_ok());
}

/// Nested optional parts multiply the readings of a text: past the limit the grammar is
/// refused at its start, or stops steering, instead of running without end.
#[test]
fn too_many_readings_are_refused_or_let_go() {
    let tok = toy(&[], 99);
    // 2^20 ways to read the start.
    let mut src = String::from("root ::= r0\n");
    for i in 0..20 {
        src += &format!("r{i} ::= r{n}? r{n}?\n", n = i + 1);
    }
    src += "r20 ::= \"a\"\n";
    let g = Grammar::parse(&src).unwrap();
    let e = GrammarFilter::new(g, "root", 100.0, &tok, true).unwrap_err();
    assert!(e.to_string().contains("too many ways"), "{e}");
    // Few at the start, many after a character.
    let mut src = String::from("root ::= \"a\" r0\n");
    for i in 0..20 {
        src += &format!("r{i} ::= r{n}? r{n}?\n", n = i + 1);
    }
    src += "r20 ::= \"b\"\n";
    let g = Grammar::parse(&src).unwrap();
    let f = GrammarFilter::new(g, "root", 100.0, &tok, true).unwrap();
    assert!(f.rejected(&[]).binary_search(&u32::from(b'b')).is_ok());
    let after = f.rejected(&[u32::from(b'a')]);
    assert!(after.binary_search(&u32::from(b'b')).is_err());
}

#[test]
fn grammars_that_cannot_run_are_clear_errors() {
    let err = |src: &str| Grammar::parse(src).unwrap_err().to_string();
    assert!(err("root ::= item\n").contains("`item` is used but never defined"));
    assert!(err("root ::= root \"a\" | \"b\"").contains("`root` is left-recursive"));
    assert!(err("root ::= x\nx ::= y? root\ny ::= \"a\"").contains("left-recursive"));
    assert!(err("root ::= (\"a\"*)*").contains("left-recursive"));
    assert_eq!(
        err("root ::= \"a\"\nx = \"b\""),
        "line 2, column 3: expected `::=`"
    );
    assert_eq!(
        err("root ::= \"abc"),
        "line 1, column 14: unexpected end of the grammar"
    );
    assert_eq!(
        err("root ::= [a-"),
        "line 1, column 13: unexpected end of the grammar"
    );
    assert!(err("root ::= ( \"a\" ").contains("expected `)`"));
    assert!(err("root ::= * \"a\"").contains("follows nothing to repeat"));
    assert!(err("root ::= \"\\q\"").contains("unknown escape"));
    assert!(err("root ::= \"\\x4\"").contains("hexadecimal"));
    assert!(err("root ::= []").contains("empty character class"));
    assert!(err("root ::= \"a\" ]").contains("end of the line"));
    assert_eq!(err("  # nothing\n"), "the grammar has no rules");
    let deep = format!(
        "root ::= {}\"a\"{}",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert!(err(&deep).contains("nested more than 256 deep"));
    let fine = format!("root ::= {}\"a\"{}", "(".repeat(200), ")".repeat(200));
    assert!(Grammar::parse(&fine).is_ok());
    let tok = toy(&[], 99);
    let g = Grammar::parse("start ::= \"a\"").unwrap();
    let e = GrammarFilter::new(g, "root", 100.0, &tok, true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the grammar has no rule `root` to start from"
    );
}

#[test]
fn escapes_comments_and_continued_lines() {
    let src = "root ::= \"\\x41\\u00e9\\t\\\"\" |  # the first\n   [\\]\\[] \"\\n\"\r\n";
    let (f, tok) = filter(src, &[]);
    assert_eq!(allowed(&f, &tok, &[]), ["A", "[", "]"]);
    let (f, tok) = filter("root ::= (\n \"a\"\n | \"b\"\n)\n", &[]);
    assert_eq!(allowed(&f, &tok, &[]), ["a", "b"]);
}

/// Any byte string parses to a grammar or an error, without a panic or a hang.
#[test]
fn arbitrary_text_never_panics() {
    let mut rng = crate::Rng::new(7);
    let alphabet = b"root ::=|()*+?[]^-\"\\xu0aZ#\n\t .";
    for _ in 0..20_000 {
        let len = (rng.next_u64() % 24) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize])
            .collect();
        let text = String::from_utf8(bytes).unwrap();
        if let Ok(g) = Grammar::parse(&text) {
            if let Some(stacks) = g.rule("root").and_then(|r| g.start(r)) {
                let _ = g.accept(&stacks, u32::from(b'a'));
            }
        }
    }
}
