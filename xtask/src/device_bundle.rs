pub fn run(_a: &[String]) -> Result<(), String> {
    Err("todo".into())
}
