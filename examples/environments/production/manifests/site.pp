# Every node gets the role its cf_role fact names (see class role).
node default {
  include role
}
