// The template the upstream tests create sandboxes from: stasis's base
// image under its E2B alias (the manual's E2B chapter names the aliases).
export const template = process.env.E2B_TESTS_TEMPLATE ?? 'base'
