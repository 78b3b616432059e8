# A class in another stage.
class wire::early {
  notify { 'early': }
}
