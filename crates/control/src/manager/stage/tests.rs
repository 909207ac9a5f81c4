//! The stage helper: how a stage is prepared and when it is removed.

use super::*;

fn leftover(stage: &Path) {
    std::fs::create_dir_all(stage).unwrap();
    std::fs::write(stage.join("old"), b"left by an earlier attempt").unwrap();
}

#[tokio::test]
async fn a_fresh_stage_is_empty_and_removed_whatever_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("stage");
    leftover(&stage);
    let n = staged(&stage, Prep::Fresh, Cleanup::Always, async {
        assert!(stage.is_dir());
        assert_eq!(std::fs::read_dir(&stage).unwrap().count(), 0);
        std::fs::write(stage.join("memory"), b"state")?;
        Ok(7)
    })
    .await
    .unwrap();
    assert_eq!(n, 7);
    assert!(!stage.exists());
    let r: Result<()> = staged(&stage, Prep::Fresh, Cleanup::Always, async {
        Err(Error::backend("the backend failed"))
    })
    .await;
    assert_eq!(r.unwrap_err().message, "the backend failed");
    assert!(!stage.exists());
}

#[tokio::test]
async fn a_stage_kept_on_error_survives_a_failure_only() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("pause-stage");
    let r: Result<()> = staged(&stage, Prep::Fresh, Cleanup::OnSuccess, async {
        std::fs::write(stage.join("memory"), b"state")?;
        Err(Error::backend("the store failed"))
    })
    .await;
    assert!(r.is_err());
    assert!(stage.join("memory").exists(), "kept for the settling");
    staged(&stage, Prep::Fresh, Cleanup::OnSuccess, async { Ok(()) })
        .await
        .unwrap();
    assert!(!stage.exists());
}

#[tokio::test]
async fn a_cleared_stage_is_gone_until_the_work_makes_it() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("resume-stage");
    leftover(&stage);
    staged(&stage, Prep::Clear, Cleanup::Always, async {
        assert!(!stage.exists());
        tokio::fs::create_dir_all(&stage).await?;
        Ok(())
    })
    .await
    .unwrap();
    assert!(!stage.exists());
}

#[tokio::test]
async fn an_untouched_stage_is_left_as_found_for_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let stage = dir.path().join("restore-stage");
    leftover(&stage);
    staged(&stage, Prep::AsIs, Cleanup::Always, async {
        assert!(stage.join("old").exists());
        Ok(())
    })
    .await
    .unwrap();
    assert!(!stage.exists());
}

#[tokio::test]
async fn the_work_does_not_run_when_the_stage_cannot_be_made() {
    let dir = tempfile::tempdir().unwrap();
    // Its parent is a file: mkdir fails.
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let stage = file.join("stage");
    let mut ran = false;
    let r = staged(&stage, Prep::Fresh, Cleanup::Always, async {
        ran = true;
        Ok(())
    })
    .await;
    assert!(r.is_err());
    assert!(!ran);
}
