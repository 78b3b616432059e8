node default {
  notify { 'unclosed':
    message => 'x',

